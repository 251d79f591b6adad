"""Pseudo-queries made from a corpus alone, offline: one per sampled document, of one kind.

* ``sentence``: one random sentence of 6-40 words (``bm25aug.train.pseudo``'s cut);
* ``title``: the document's title (documents without one are skipped);
* ``keyphrase``: the document's ``KEYPHRASE_WORDS`` words of highest tf-idf, in document order (df
  from the corpus, or from ``DF_SAMPLE`` documents of a larger one);
* ``span``: a random window of ``SPAN_WORDS`` consecutive words;
* ``mix``: the three kinds above but span in turn, document by document.

A document that yields none of its kind gives a span instead (NFCorpus's texts, stripped of their
punctuation, have no sentence of 6-40 words).

A query's id is ``adapt:<docid>`` and its one judged document the one it was made from, which the
trainer keeps out of the query's candidates: with its own words in it, BM25 and the teacher both
rank it first and it teaches nothing (docs/adapt.md).
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Mapping

from bm25aug.data.corpus import Document
from bm25aug.data.layouts import Split
from bm25aug.train.pseudo import MAX_WORDS, MIN_WORDS, pseudo_queries, sample_ids

PREFIX = "adapt:"
KEYPHRASE_WORDS = 5
SPAN_WORDS = (8, 16)
DF_SAMPLE = 100_000
_WORD = re.compile(r"[a-z][a-z0-9\-]{2,}")
# Function words a keyphrase never holds (Lucene's English stopwords and the commonest others).
_STOP = frozenset("""a an and are as at be but by for if in into is it no not of on or such that the their then
there these they this to was will with we our from has have had were been which also can may using used
than other between both all its each more most some who what when where how about after over under
only very well however while these those would should could during study studies results found""".split())


def make_queries(corpus: Mapping[str, Document], kind: str, n: int, seed: int, skip: set[str] = frozenset(),
                 df: Counter | None = None) -> dict[str, str]:
    """Up to ``n`` pseudo-queries ``{adapt:<docid>: text}`` of ``kind`` from documents not in
    ``skip`` (sampled with ``seed``); a document that yields none of its kind gives a span, and
    one too short for that (under 8 words) is passed over."""
    rng = random.Random(seed)
    ids = [d for d in sample_ids(corpus, n + len(skip), rng) if d not in skip][:n]
    if kind in ("keyphrase", "mix") and df is None:
        df = word_df(corpus, rng)
    out = {}
    for i, docid in enumerate(ids):
        doc = corpus[docid]
        this = ("sentence", "title", "keyphrase")[i % 3] if kind == "mix" else kind
        text = _one(doc, this, rng, df) or _one(doc, "span", rng, df)
        if text:
            out[PREFIX + docid] = text
    return out


def _one(doc: Document, kind: str, rng: random.Random, df: Counter | None) -> str | None:
    if kind == "sentence":
        return _sentence(doc, rng)
    if kind == "title":
        return doc.title.strip() or None
    if kind == "span":
        words = doc.text.split()
        if len(words) < SPAN_WORDS[0]:
            return None
        size = rng.randint(SPAN_WORDS[0], min(SPAN_WORDS[1], len(words)))
        at = rng.randrange(len(words) - size + 1)
        return " ".join(words[at:at + size])
    return keyphrase(doc, df)


def _sentence(doc: Document, rng: random.Random) -> str | None:
    """One sentence of ``MIN_WORDS``-``MAX_WORDS`` words, as ``bm25aug.train.pseudo`` cuts them."""
    made = pseudo_queries({"d": doc}, 1, rng.randrange(1 << 30))
    return next(iter(made.queries.values()), None)


def words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def word_df(corpus: Mapping[str, Document], rng: random.Random) -> Counter:
    """Document frequency of each word, over the corpus or ``DF_SAMPLE`` documents of it; the
    count of documents read is under the key ``""``."""
    ids = sample_ids(corpus, DF_SAMPLE, random.Random(rng.randrange(1 << 30))) if len(corpus) > DF_SAMPLE else None
    df: Counter = Counter()
    docs = (corpus[d] for d in ids) if ids is not None else (doc for _, doc in corpus.items())
    for doc in docs:
        df.update(set(words(doc.contents)))
        df[""] += 1
    return df


def keyphrase(doc: Document, df: Counter) -> str | None:
    """The document's ``KEYPHRASE_WORDS`` words of highest tf-idf, in the order they first appear."""
    found = words(doc.contents)
    if len(set(found)) < 2:
        return None
    n, tf = max(df[""], 1), Counter(found)
    score = {w: c * math.log((n + 1) / (df.get(w, 0) + 1)) for w, c in tf.items()}
    top = set(sorted(score, key=lambda w: (-score[w], w))[:KEYPHRASE_WORDS])
    return " ".join(dict.fromkeys(w for w in found if w in top))


def as_split(queries: dict[str, str]) -> Split:
    """The pseudo-queries as a training split: each judges the document it was made from."""
    return Split(dict(queries), {q: {q[len(PREFIX):]: 1} for q in queries})


__all__ = ["KEYPHRASE_WORDS", "MAX_WORDS", "MIN_WORDS", "PREFIX", "as_split", "keyphrase", "make_queries", "word_df"]
