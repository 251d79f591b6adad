"""Whether a field of an index on a cluster gives the flat index's terms: ``FieldAnalysis`` asks
the cluster's own ``_analyze`` (with the index and the field, so the field's own analyzer, search
analyzer aside: documents are indexed with the index analyzer) and compares its tokens with the
English analyzer's in our process (``bm25aug.lucene.analysis``, Anserini's ``DefaultEnglishAnalyzer``).

* Texts go in batches: one ``_analyze`` takes several (``text`` as a list); the cluster numbers
  their offsets one after another, each text ``len + 1`` UTF-16 units past the last, so each token
  is told to its text by where it starts. A text whose tokens differ is asked again alone before
  the difference is reported, so a batch never blames the wrong text.
* A request holds at most ``index.analyze.max_token_count`` characters (the cluster's limit on the
  tokens one ``_analyze`` makes; a token is at least one character for the analyzers that can
  match ours); a longer text is checked in pieces cut at white space, each compared on its own.
* What was checked is remembered (``CHECKED_TEXTS`` texts at most, ``bm25aug.cache.LRU``): a query
  asked again costs nothing.
* The first difference is one line: the text around it, the cluster's tokens and ours, and the fix.
"""

from __future__ import annotations

import bisect

from bm25aug.cache import LRU
from bm25aug.errors import UserError

CHECKED_TEXTS = 1 << 16  # query texts remembered as checked (a few MB at most)
MAX_TOKEN_COUNT = 10_000  # OpenSearch's default index.analyze.max_token_count
# A fixed text through every part of Anserini's English analyzer: possessives (straight and curly
# apostrophes), stop words, Porter stemming, case, numbers, hyphens, URLs and e-mail addresses,
# accented letters, non-Latin scripts, ideographs, emoji and a token past 255 characters.
PROBE = ("The patients' outcomes and the doctor's reports: John’s CAT-scans were running, generalized, "
         "relational; THE studies of Ceci N'est Pas show 3.14 mg/kg, 1,000 cells, 2nd-line B12 (IL-6) "
         "in U.S.A. at http://example.com/a?b=1 or mail@example.org. Naïve café Zürich résumé "
         "Ελληνικά русский текст العربية 東京大学 日本語のテキスト 한국어 😀 don't can't it's "
         "hopefully quickly happiness organization connected connecting " + "x" * 300 + " end.")


class FieldAnalysis:
    """``field`` of the index ``name`` on ``client``'s cluster, compared with the flat index's analyzer
    (``where``: how messages name the index; ``limit``: its ``index.analyze.max_token_count``)."""

    def __init__(self, client, name: str, field: str, where: str, limit: int = MAX_TOKEN_COUNT):
        self.client, self.name, self.field, self.where = client, name, field, where
        self.limit = max(int(limit), 1)
        self._checked = LRU(CHECKED_TEXTS)

    def check(self, texts: list[str], labels: list[str]) -> None:
        """That the field analyzes each of ``texts`` into the flat index's terms; ``labels``: what
        each is ("the query", "stored document '123'"), for the message naming the first that does not."""
        from bm25aug.lucene.analysis import analyze

        todo = [t for t in dict.fromkeys(texts) if isinstance(t, str) and self._checked.get(t) is None]
        pieces = [(text, piece) for text in todo for piece in _pieces(text, self.limit)]
        for batch in _batches(pieces, self.limit):
            for (text, piece), theirs in zip(batch, self._analyze([p for _, p in batch])):
                ours = analyze(piece)
                if theirs != ours and (theirs := self._analyze([piece])[0]) != ours:
                    raise UserError(difference(self.where, self.field, labels[texts.index(text)], piece, theirs, ours))
        for text in todo:
            self._checked.put(text, True)

    def _analyze(self, texts: list[str]) -> list[list[str]]:
        """Each text's tokens as the field's analyzer gives them, from one ``_analyze`` request."""
        from bm25aug.opensearch.answers import shaped

        answer = self.client.request("POST", f"/{self.name}/_analyze", {"field": self.field, "text": texts})
        starts, at = [], 0
        for text in texts:  # where each text's offsets begin: each is its UTF-16 length and one past the last
            starts.append(at)
            at += len(text.encode("utf-16-le")) // 2 + 1
        tokens: list[list[str]] = [[] for _ in texts]

        def read():
            for token in answer["tokens"]:
                tokens[bisect.bisect_right(starts, int(token["start_offset"])) - 1].append(str(token["token"]))
            return tokens

        return shaped(self.where, f"POST /{self.name}/_analyze", read)


def difference(where: str, field: str, what: str, text: str, theirs: list[str], ours: list[str]) -> str:
    """One line naming the first token where the field's analyzer and ours part, and the fix."""
    at = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
    window = lambda tokens: tokens[max(0, at - 2):at + 4]  # noqa: E731
    first = (f"token {at + 1}: {theirs[at]!r} on the cluster, {ours[at]!r} here" if at < min(len(theirs), len(ours))
             else f"the cluster gives {len(theirs)} tokens, this analyzer {len(ours)}")
    return (f"{where}: field {field!r} does not analyze text as the flat index does (Anserini's English analyzer), so "
            f"its terms are not the ones a query or model sends: in {what} ({_excerpt(text)!r}) the cluster's "
            f"tokens from {max(0, at - 2) + 1} are {window(theirs)} and ours {window(ours)} (first difference at "
            f"{first}); fix: name a field analyzed with OpenSearch's built-in `english` analyzer, or index the "
            f"corpus into a new index with `bm25aug index --dataset NAME --to URL`")


def _excerpt(text: str, size: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= size else text[:size - 3] + "..."


def _pieces(text: str, limit: int) -> list[str]:
    """``text`` cut at white space into pieces of at most ``limit`` characters (UTF-16 units counted
    as characters, at most twice as many), hard cuts only where a run has no white space."""
    limit = max(limit // 2, 1)
    pieces = []
    while len(text) > limit:
        cut = max(text.rfind(" ", 0, limit), text.rfind("\n", 0, limit))
        cut = cut if cut > 0 else limit
        pieces.append(text[:cut])
        text = text[cut:]
    return pieces + [text]


def _batches(pieces: list[tuple[str, str]], limit: int):
    """``pieces`` in batches of at most ``limit`` UTF-16 units."""
    batch, size = [], 0
    for item in pieces:
        n = len(item[1].encode("utf-16-le")) // 2 + 1
        if batch and size + n > limit:
            yield batch
            batch, size = [], 0
        batch.append(item)
        size += n
    if batch:
        yield batch
