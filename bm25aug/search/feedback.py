"""RM3 pseudo-relevance feedback over any first-stage query, including a learned (augmented) one.

Pyserini's RM3 (``LuceneSearcher.set_rm3``) starts from the English analyzer's bag of words and
refuses a Lucene query, so it cannot expand an augmented query. This is Anserini's
``Rm3Reranker`` with Pyserini's defaults, step for step and in the same float32/float64
arithmetic, over a weighted term list ``{term: boost}``:

1. the first stage's top ``fb_docs`` (Anserini's order: score, then external id; raw scores);
2. each one's stored document vector, its terms filtered (2-20 characters of ``[a-z0-9]``, in at
   most 10% of the documents) and pruned to its ``fb_terms`` most frequent, then L1-normalized;
3. the relevance model: each term's weight summed over the documents, times the document's score,
   pruned to ``fb_terms`` and L1-normalized;
4. interpolated with the query's own term list, L1-normalized (a bag of words: its counts; an
   augmented query: its learned boosts), ``original_weight`` to the query;
5. searched again, as boosted term queries, for k hits in Anserini's order.

On a bag-of-words query it reproduces Pyserini's bm25-rm3 run (``tests/test_feedback.py``).

The same relevance model feeds **learned feedback**: a model trained with ``feedback_terms`` N
reads each query followed by the surface words of its N heaviest feedback terms, less the query's
own (``FeedbackTerms``), and ``FeedbackEncoder`` gives it them, one first search per query.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bm25aug.errors import UserError
from bm25aug.limits import check, check_query
from bm25aug.lucene.doc_terms import DocTermReader
from bm25aug.lucene.reader import LuceneIndex
from bm25aug.ranking import EMPTY, TopK
from bm25aug.model.encoder import QueryEncoder
from bm25aug.progress import progress
from bm25aug.search.bm25 import BM25Searcher
from bm25aug.search.hits import Searches

if TYPE_CHECKING:
    from bm25aug.search.augmented import AugmentedSearcher

_TERM = re.compile(r"[a-z0-9]+")
_MAX_DF = np.float32(0.1)  # Anserini's df filter: a term in more than 10% of the documents is no feedback term
_NORM_MIN = np.float32(0.001)  # a document whose kept terms weigh less is skipped
_CACHED_DOCS = 100_000  # document vectors kept between queries


@dataclass(frozen=True)
class RM3:
    """Pyserini's ``set_rm3`` defaults."""

    fb_terms: int = 10
    fb_docs: int = 10
    original_weight: float = 0.5


def _top_by_value(terms: list[str], values: np.ndarray, n: int) -> tuple[list[str], np.ndarray]:
    """``FeatureVector.pruneToSize``: the n largest values, ties by term."""
    order = sorted(range(len(terms)), key=lambda i: (-values[i], terms[i]))[:n]
    return [terms[i] for i in order], values[order]


def _unit_l1(values: np.ndarray) -> np.ndarray:
    """``FeatureVector.scaleToUnitL1Norm``: the norm in double, each value divided in double, kept as float."""
    return (values.astype(np.float64) / np.abs(values.astype(np.float64)).sum()).astype(np.float32)


class RM3Searcher(Searches):
    """RM3 over ``first``'s query: a ``BM25Searcher`` (its bag of words, as Pyserini's bm25-rm3)
    or an ``AugmentedSearcher`` (its learned term list). ``search_arrays``, ``batch_search_arrays``
    and ``hits`` as the other searchers; each query costs a second search and ``fb_docs``
    document vectors (cached)."""

    def __init__(self, first: BM25Searcher | AugmentedSearcher, params: RM3 = RM3()):
        self.first, self.bag_of_words = first, isinstance(first, BM25Searcher)
        self.bm25: BM25Searcher = first if self.bag_of_words else first.bm25
        for name in ("fb_terms", "fb_docs", "original_weight"):
            check(name, getattr(params, name), name)
        self.params = params
        if not 0 < params.original_weight < 1:  # at 0 or 1 Anserini keeps boost-0 clauses, which match with score 0
            raise UserError(f"original_weight {params.original_weight} must lie strictly between 0 and 1; fix: pass "
                            f"e.g. 0.5 (Pyserini's default)")
        self.index = self.bm25.index
        if not isinstance(self.index, LuceneIndex):  # Lucene's raw hits and document vectors: a folder's alone
            raise UserError("RM3 reads what only an index folder holds (Lucene's unrounded scores and stored document "
                            "vectors), and this index is on a cluster; fix: pass the dataset's index folder as --index")
        self.vectors = DocTermReader(self.index, pretokenized=self.bm25.meta.flavor == "wp")
        if not self.vectors.readable:
            raise UserError(f"{self.bm25.index_dir} stores no document vectors, which RM3 reads; fix: rebuild it "
                            f"(`bm25aug index --dataset NAME --force`) or pass an index built with -storeDocvectors")
        self._cache: dict[int, tuple[list[str], np.ndarray]] = {}

    @property
    def docids(self) -> np.ndarray:
        return self.bm25.docids

    def hits(self, top: TopK):
        return self.bm25.hits(top)

    def verify(self, dataset) -> None:
        self.bm25.verify(dataset)

    def query_terms(self, query: str) -> dict[str, float]:
        """The first stage's term list of ``query`` (what RM3 expands)."""
        return self.first.query_terms(query) if self.bag_of_words else self.first.term_list(query)

    def _doc_vector(self, doc: int) -> tuple[list[str], np.ndarray]:
        """A document's feedback terms and their L1-normalized weights (``createdFeatureVector``,
        pruned to ``fb_terms``); empty weights when its kept terms weigh (almost) nothing."""
        if (got := self._cache.get(doc)) is None:
            n = np.float32(self.index.num_docs)
            kept = {t: f for t, f in self.vectors.terms(doc).items()
                    if 2 <= len(t) <= 20 and _TERM.fullmatch(t) and np.float32(self.index.doc_freq(t)) / n <= _MAX_DF}
            terms, tf = _top_by_value(list(kept), np.asarray(list(kept.values()), np.float32), self.params.fb_terms)
            norm = np.float32(np.abs(tf.astype(np.float64)).sum())
            got = (terms, tf / norm) if norm > _NORM_MIN else ([], np.zeros(0, np.float32))
            if len(self._cache) >= _CACHED_DOCS:
                self._cache.clear()
            self._cache[doc] = got
        return got

    def relevance(self, terms: dict[str, float]) -> dict[str, np.float32]:
        """The relevance model of a first-stage term list (boosts > 0): its ``fb_terms`` feedback
        terms, L1-normalized, heaviest first (ties by term)."""
        docs, scores = self.index.raw_ranked(self.index.weighted_query(terms), self.params.fb_docs)
        model: dict[str, np.float32] = {}
        for doc, score in zip(docs.tolist(), scores):
            for term, value in zip(*self._doc_vector(doc)):
                model[term] = np.float32(model.get(term, np.float32(0)) + value * score)
        fb_terms, fb_weights = _top_by_value(list(model), np.asarray(list(model.values()), np.float32),
                                             self.params.fb_terms)
        return dict(zip(fb_terms, _unit_l1(fb_weights))) if fb_terms else {}

    def expand(self, terms: dict[str, float]) -> dict[str, float]:
        """The RM3 query of a first-stage term list (``{}``: no terms, nothing to search)."""
        terms = {t: w for t, w in terms.items() if w > 0}
        if not terms:
            return {}
        relevance = self.relevance(terms)
        original = dict(zip(terms, _unit_l1(np.asarray(list(terms.values()), np.float32))))
        # FeatureVector.interpolate: (float) (xWeight * x + (1.0 - xWeight) * y), the first product in float.
        alpha, zero = np.float32(self.params.original_weight), np.float32(0)
        return {t: float(np.float32(np.float64(alpha * original.get(t, zero))
                                    + (1.0 - np.float64(alpha)) * np.float64(relevance.get(t, zero))))
                for t in {**original, **relevance}}

    def search_arrays(self, query: str, k: int = 1000) -> TopK:
        check("k", k)
        if not check_query(query).strip():
            return EMPTY
        return self.bm25.search_terms_arrays(self.expand(self.query_terms(query)), k)

    def batch_search_arrays(self, queries: list[str], k: int = 1000, threads: int = 1,
                            desc: str | None = None) -> list[TopK]:
        """First-stage term lists in one batch (an augmented first stage encodes in batches),
        each query's feedback in turn, then the expanded queries on the Java pool."""
        check("k", k)
        if self.bag_of_words:
            lists = [self.first.query_terms(q) if check_query(q).strip() else {} for q in queries]
        else:
            lists = self.first.term_lists(list(queries), threads)
        expanded = [self.expand(t) for t in progress(lists, desc=desc, unit="q", disable=desc is None)]
        return self.bm25.batch_search_terms_arrays(expanded, k, threads)


class FeedbackTerms:
    """What a learned-feedback model reads after a query: its BM25 top ``fb_docs`` documents' RM3
    relevance model (Pyserini's defaults, ``terms`` feedback terms), less the query's own terms,
    heaviest first, each as a word of the encoder's vocabulary that analyzes to it (the shortest;
    "diabet" reads as "diabetes"), else as the stemmed term itself."""

    def __init__(self, searcher: BM25Searcher, terms: int, tokenizer):
        """``tokenizer``: the model's, whose words spell the feedback."""
        from bm25aug.lucene.analysis import flat_map

        if searcher.meta.flavor != "flat":
            raise UserError(f"learned feedback reads RM3 terms of a flat index, and {searcher.index_dir} is "
                            f"{searcher.meta.flavor}; fix: use the dataset's flat index")
        self.bm25, self.rm3 = searcher, RM3Searcher(searcher, RM3(fb_terms=check("feedback_terms", terms)))
        fmap, vocab = flat_map(tokenizer), tokenizer.convert_ids_to_tokens
        words: dict[str, str] = {}
        for token, term in zip(vocab(fmap.vocab_ids.tolist()), fmap.term_ids.tolist()):
            stem = fmap.terms[term]
            if stem not in words or len(token) < len(words[stem]):
                words[stem] = token
        self.words = words

    def text(self, query: str) -> str:
        """The feedback text of one query ("" when it matches nothing)."""
        if not (terms := self.bm25.query_terms(query) if check_query(query).strip() else {}):
            return ""  # query_terms counts each term, so every weight is positive
        return " ".join(self.words.get(t, t) for t in self.rm3.relevance(terms) if t not in terms)

    def texts(self, queries: list[str], desc: str | None = None) -> list[str]:
        """``text`` of each query, with a progress bar named ``desc`` on a terminal."""
        return [self.text(q) for q in progress(queries, desc=desc, unit="q", disable=desc is None)]


class FeedbackEncoder(QueryEncoder):
    """A learned-feedback model (``config.reads_feedback``) with the index it reads its
    feedback from: each query costs one BM25 search and RM3 before it is encoded. Any runtime of
    the model (``load_encoder``); ``AugmentedSearcher`` wraps such a model in one itself."""

    def __init__(self, model: QueryEncoder, searcher: BM25Searcher):
        self.model, self.feedback = model, FeedbackTerms(searcher, model.config.feedback_terms, model.tokenizer)
        self.config, self.tokenizer, self.path = model.config, model.tokenizer, model.path
        self.batch_exact = model.batch_exact

    def encode_batch(self, texts: list[str], feedback: list[str] | None = None) -> list[dict[str, float]]:
        return self.model.encode_batch(texts, self.feedback.texts(texts) if feedback is None else feedback)


def reading_feedback(encoder: QueryEncoder, searcher: BM25Searcher) -> QueryEncoder:
    """``encoder`` as it searches ``searcher``: a model that reads feedback (``reads_feedback``)
    wrapped in a ``FeedbackEncoder`` over that index (once), any other encoder as it is."""
    if not encoder.config.reads_feedback or isinstance(encoder, FeedbackEncoder):
        return encoder
    return FeedbackEncoder(encoder, searcher)
