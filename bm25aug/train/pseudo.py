"""Pseudo-queries cut from the corpus: more training queries for small training sets.

A small set such as SciFact has a few hundred judged queries, so the model sees few examples of
which terms travel together in its domain. A pseudo-query is one sentence of a sampled document;
its positive is the rest of that document (the Inverse Cloze Task; Contriever's cropping kept to
what BM25 can score): the trainer scores the document with the sentence's terms taken out
(``TorchBM25.held_out_row``), so the ranking loss rewards the query words and added terms that
the rest of the document shares. Only the corpus is read, never a judgment (documents judged
for dev or test queries may be sampled, as in any unsupervised adaptation to the target corpus).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping

from bm25aug.data.corpus import Document
from bm25aug.data.layouts import Split

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
MIN_WORDS, MAX_WORDS = 6, 40  # SciFact's claims are 12 words on average; NQ's questions 9
PREFIX = "pseudo:"


def sample_ids(corpus: Mapping[str, Document], n: int, rng: random.Random) -> list[str]:
    """``n`` document ids drawn uniformly without replacement, streaming (reservoir sampling), so
    a 21M-passage corpus never becomes a list."""
    chosen: list[str] = []
    for i, docid in enumerate(corpus):
        if i < n:
            chosen.append(docid)
        elif (j := rng.randrange(i + 1)) < n:
            chosen[j] = docid
    return sorted(chosen)


def pseudo_queries(corpus: Mapping[str, Document], n: int, seed: int) -> Split:
    """Up to ``n`` pseudo-queries (query id ``pseudo:<docid>``): one random sentence of
    ``MIN_WORDS``–``MAX_WORDS`` words per sampled document; a document without one is skipped."""
    rng = random.Random(seed)
    queries, qrels = {}, {}
    for docid in sample_ids(corpus, n, rng):
        sentences = [s for s in _SENTENCE_END.split(corpus[docid].text) if MIN_WORDS <= len(s.split()) <= MAX_WORDS]
        if sentences:
            queries[PREFIX + docid] = rng.choice(sentences)
            qrels[PREFIX + docid] = {docid: 1}
    return Split(queries, qrels)


def with_pseudo_queries(train: Split, corpus: Mapping[str, Document], n: int, seed: int) -> Split:
    """``train`` plus ``n`` pseudo-queries (see ``pseudo_queries``)."""
    extra = pseudo_queries(corpus, n, seed)
    return Split({**train.queries, **extra.queries}, {**train.qrels, **extra.qrels}, train.answers, train.negatives)
