"""Documents as the text a ``wp`` index stores: their WordPiece tokens joined by spaces.

Hugging Face's Rust tokenizer computes offsets and alignments for every character, which an index
build never uses; on 2 cores it tokenized about 3,600 passages/s and made the wp build of 1M
passages 2.8x the flat one (``benchmarks/scale.py``). ``DocumentTokenizer`` gives exactly the
same tokens for a BERT-style tokenizer, about 10x cheaper per core:

* **normalize**: pure-ASCII text (most passages) through one ``str.translate`` that does what
  ``BertNormalizer`` does to ASCII (drop control characters, tab/newline/CR to space, lowercase);
  any other text through the tokenizer's own normalizer;
* **pre-tokenize**: ``BertPreTokenizer``'s rule as one regex (runs of characters that are neither
  whitespace nor punctuation; each punctuation character alone);
* **WordPiece**: the tokenizer's own model, once per distinct word (cached).

A tokenizer with any other pipeline goes through Hugging Face's ``encode_batch`` unchanged.
``tests/test_pretokenize.py`` checks equality on every document of the shared corpora and on
adversarial text. Large corpora are tokenized in worker processes, a bounded number of batches
ahead, so memory stays flat whatever the corpus size.
"""

from __future__ import annotations

import json
import multiprocessing
import re
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor

import regex

_ASCII_NORMALIZE = str.maketrans({**{c: None for c in [*range(0, 9), 11, 12, *range(14, 32), 127]},
                                  9: " ", 10: " ", 13: " ", **{c: c + 32 for c in range(65, 91)}})
_ASCII_WORDS = re.compile(r"[a-z0-9]+|[^a-z0-9 ]")  # after _ASCII_NORMALIZE: space is the only whitespace
_PUNCT = r"\p{P}!-/:-@\[-`{-~"  # BERT's punctuation: Unicode P* and every ASCII non-alphanumeric symbol
_WORDS = regex.compile(rf"[^\p{{White_Space}}{_PUNCT}]+|[{_PUNCT}]")
_CACHE_LIMIT = 2_000_000  # distinct words kept; the cache is emptied beyond this
_BERT_NORMALIZER = {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                    "strip_accents": None, "lowercase": True}


class DocumentTokenizer:
    """``text -> " ".join(tokens)`` equal to the Rust tokenizer's ``encode(text).tokens`` without
    special tokens or truncation (``backend``: a ``tokenizers.Tokenizer``)."""

    def __init__(self, backend):
        self.backend = backend
        spec = json.loads(backend.to_str())
        self.fast = (spec.get("normalizer") == _BERT_NORMALIZER and spec.get("pre_tokenizer") == {"type": "BertPreTokenizer"}
                     and spec.get("model", {}).get("type") == "WordPiece")
        self.cache: dict[str, str] = {}

    def __call__(self, texts: list[str]) -> list[str]:
        if not self.fast:
            return [" ".join(e.tokens) for e in self.backend.encode_batch(texts, add_special_tokens=False)]
        if len(self.cache) > _CACHE_LIMIT:
            self.cache.clear()
        return [self._one(text) for text in texts]

    def _one(self, text: str) -> str:
        if text.isascii():
            words = _ASCII_WORDS.findall(text.translate(_ASCII_NORMALIZE))
        else:
            words = _WORDS.findall(self.backend.normalizer.normalize_str(text))
        get = self.cache.get
        return " ".join([get(w) or self._pieces(w) for w in words])

    def _pieces(self, word: str) -> str:
        pieces = self.cache[word] = " ".join(t.value for t in self.backend.model.tokenize(word))
        return pieces


_worker: DocumentTokenizer | None = None


def _start_worker(spec: str) -> None:
    global _worker
    from tokenizers import Tokenizer

    _worker = DocumentTokenizer(Tokenizer.from_str(spec))


def _work(texts: list[str]) -> list[str]:
    return _worker(texts)


def tokenized_batches(backend, batches: Iterable[list[str]], processes: int = 1) -> Iterator[list[str]]:
    """Each batch of texts as ``DocumentTokenizer`` writes it, in order. With ``processes > 1``
    the batches are tokenized in that many worker processes (started fresh, never forked from a
    process that runs a JVM), at most two batches per worker ahead of the caller."""
    if processes <= 1:
        tokenize = DocumentTokenizer(backend)
        yield from (tokenize(batch) for batch in batches)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=context, initializer=_start_worker,
                             initargs=(backend.to_str(),)) as pool:
        pending: deque = deque()
        for batch in batches:
            pending.append(pool.submit(_work, batch))
            if len(pending) >= 2 * processes:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
