"""Hybrid search: a sparse searcher (bm25-flat, or a model's term lists on the flat index) fused
with the dense peer (``bm25aug.search.dense``), as BEIR, Contriever and Pyserini's hybrid runs
fuse a sparse and a dense retriever. The dense side searches the corpus's HNSW index when one
exists (``bm25aug.dense.hnsw``; built first from ``EXACT_BELOW`` documents), else exactly.

Two fusions (``Fusion``), each over the two sides' top ``depth`` hits (at least ``k``):

- ``rrf``: reciprocal rank fusion (Cormack et al., 2009): a document scores
  ``1 / (rrf_k + rank)`` summed over the lists it is in.
- ``interpolation``: each list's scores min-max normalised to [0, 1] over its own hits (a list
  whose scores are all equal: all 1), then ``weight`` × sparse + (1 - ``weight``) × dense; a
  document missing from a list gets 0 from it.

The sum is in float64, the sparse side's share first, and equal sums are ordered by external id
(Anserini's tie rule), so the fused run equals fusing the two runs by hand from their TREC files.
The default, interpolation with the sparse side's weight 0.4 over each side's top 1000, was
chosen on the dev splits of the corpora the packaged ``general`` never trains on (SciFact train,
NFCorpus dev, SQuAD train), with the default dense model, as the best mean for the ``general``
hybrid among RRF and weights 0.05 to 0.95 that stay within .005 of the better of its two halves
on each (``research/hybrid_defaults.py``, recorded in ``docs/data/hybrid_defaults.json`` beside the
SQuADShifts dev slices).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bm25aug.errors import UserError
from bm25aug.limits import check
from bm25aug.bm25_defaults import B, K1
from bm25aug.lucene.reader import LuceneIndex
from bm25aug.ranking import EMPTY, TopK
from bm25aug.search.dense import DenseSearcher
from bm25aug.search.hits import Searches

FUSIONS = ("rrf", "interpolation")
RRF_K = 60  # Cormack et al.'s constant, as Pyserini's fusion uses
INTERPOLATION_WEIGHT = 0.4  # the sparse side's share (module docstring)


@dataclass(frozen=True)
class Fusion:
    """How two runs are fused. ``weight``: interpolation's share of the sparse side (the dense
    side gets the rest; None: ``INTERPOLATION_WEIGHT``), never given with rrf, which weighs the two
    lists alike; ``depth``: the hits each side contributes (at least the k asked for)."""

    method: str = "interpolation"  # the defaults: chosen on the shared sets' dev splits (module docstring)
    weight: float | None = None
    depth: int = 1000
    rrf_k: int = RRF_K

    def __post_init__(self) -> None:
        if self.method not in FUSIONS:
            raise UserError(f"unknown fusion {self.method!r}; fix: use one of {', '.join(FUSIONS)}")
        refuse_rrf_weight(self.method, self.weight is not None)
        if self.method == "interpolation":
            object.__setattr__(self, "weight", INTERPOLATION_WEIGHT if self.weight is None else self.weight)
            check("fusion_weight", self.weight)
        check("fusion_depth", self.depth)
        check("rrf_k", self.rrf_k, option="rrf_k")

    @classmethod
    def given(cls, method: str | None = None, weight: float | None = None, depth: int | None = None) -> "Fusion":
        """The default fusion with the settings given (None: the default's)."""
        settings = {"method": method, "weight": weight, "depth": depth}
        return cls(**{name: value for name, value in settings.items() if value is not None})

    def side(self, top: TopK) -> np.ndarray:
        """One list's contribution a hit, before the side's weight (float64)."""
        if self.method == "rrf":
            return 1.0 / (self.rrf_k + np.arange(1, len(top.lucene_ids) + 1, dtype=np.float64))
        scores = top.scores.astype(np.float64)
        if not len(scores):
            return scores
        low, high = scores.min(), scores.max()
        return np.ones_like(scores) if high == low else (scores - low) / (high - low)

    @property
    def weights(self) -> tuple[float, float]:
        """The sparse and the dense side's weights."""
        return (1.0, 1.0) if self.method == "rrf" else (float(self.weight), 1.0 - float(self.weight))

    def describe(self) -> str:
        how = f"rrf_k {self.rrf_k}" if self.method == "rrf" else f"sparse weight {self.weight:g}"
        return f"{self.method} ({how}, depth {self.depth})"


def refuse_rrf_weight(method: str | None, weight_given: bool) -> None:
    """A weight given with rrf would be ignored: one line instead (the API, the commands, serve)."""
    if method == "rrf" and weight_given:
        raise UserError("a fusion weight is interpolation's, and rrf weighs the two lists alike; fix: drop the "
                        "weight, or use interpolation")


DEFAULT_FUSION = Fusion()


def fuse(sparse: TopK, dense: TopK, k: int, fusion: Fusion, id_order: np.ndarray) -> TopK:
    """The fused top ``k`` of two lists of the same index's doc numbers; ``id_order``: each doc
    number's place in external-id order (the tie rule). Only the lists' documents are touched."""
    ws, wd = fusion.weights
    ids = np.concatenate([sparse.lucene_ids, dense.lucene_ids]).astype(np.int64)
    if not len(ids):
        return EMPTY
    contributions = np.concatenate([ws * fusion.side(sparse), wd * fusion.side(dense)])
    found, where = np.unique(ids, return_inverse=True)
    scores = np.bincount(where, weights=contributions, minlength=len(found))  # summed in input order: sparse first
    order = np.lexsort((id_order[found], -scores))[:k]
    return TopK(found[order], scores[order])


class HybridSearcher(Searches):
    """A sparse searcher (``BM25Searcher`` on a flat index, or an ``AugmentedSearcher``) fused with
    a ``DenseSearcher`` of the same index; hits, ``search`` and batches as the other searchers'."""

    def __init__(self, sparse, dense: DenseSearcher, fusion: Fusion | None = None):
        if not np.array_equal(sparse.docids, dense.docids):
            raise UserError("the sparse and the dense searcher search different indexes; fix: make the dense "
                            "searcher over the sparse searcher's own index folder")
        self.sparse, self.dense, self.fusion = sparse, dense, fusion or DEFAULT_FUSION
        self.encode_seconds = dense.encode_seconds  # the dense side's corpus encoding (once, cached)

    @classmethod
    def from_pretrained(cls, model: str | Path | None, index: str | Path, dense_model=None, fusion: Fusion | None = None,
                        k1: float = K1, b: float = B, dense_search: str | Path = "auto",
                        **model_options) -> "HybridSearcher":
        """``model`` (e.g. ``"general"``; None: bm25-flat) on the flat ``index`` folder, fused with
        ``dense_model`` (None: ``DEFAULT_DENSE_MODEL``), searched as ``dense_search`` says (``DenseSearcher``'s
        ``search``: by default ``"auto"``, exact search below ``EXACT_BELOW`` documents whatever the cache
        holds, and from it the corpus's HNSW index, built first when missing). ``model_options``:
        ``AugmentedSearcher``'s."""
        from bm25aug.search.augmented import AugmentedSearcher
        from bm25aug.search.bm25 import BM25Searcher

        if model is None:
            sparse = BM25Searcher(index, k1, b, flavor="flat")
        else:
            sparse = AugmentedSearcher.from_pretrained(model, index, k1, b, **model_options)
        return cls(sparse, DenseSearcher(local_index(sparse), dense_model, dense_search), fusion)

    @property
    def docids(self) -> np.ndarray:
        return self.sparse.docids

    @property
    def id_order(self) -> np.ndarray:
        """Each doc number's place in external-id order: the index's own (``LuceneIndex.id_rank``)."""
        return self.dense.index.id_rank

    def depth(self, k: int) -> int:
        return max(self.fusion.depth, check("k", k))

    def hits(self, top: TopK):
        return self.sparse.hits(top)

    def verify(self, dataset) -> None:
        """That the index holds ``dataset``'s very corpus (the sparse side's, which the dense side encodes)."""
        self.sparse.verify(dataset)

    def search_arrays(self, query: str, k: int = 1000) -> TopK:
        depth = self.depth(k)
        return fuse(self.sparse.search_arrays(query, depth), self.dense.search_arrays(query, depth), k, self.fusion,
                    self.id_order)

    def batch_search_arrays(self, queries: list[str], k: int = 1000, threads: int = 1,
                            desc: str | None = None, term_lists: list[dict[str, float]] | None = None) -> list[TopK]:
        """``term_lists``: the sparse model's own term lists of ``queries`` (``AugmentedSearcher.term_lists``),
        when the caller wrote them already: searched as they are, not encoded again."""
        depth = self.depth(k)
        sparse = self.sparse.batch_search_arrays(queries, depth, threads, desc) if term_lists is None else \
            self.sparse.batch_search_terms_arrays(term_lists, depth, threads, desc)
        dense = self.dense.batch_search_arrays(queries, depth, threads, desc and f"{desc} (dense)")
        return [fuse(s, d, k, self.fusion, self.id_order) for s, d in zip(sparse, dense)]


def local_index(sparse) -> LuceneIndex:
    """The Lucene index folder a sparse searcher searches, which the dense side encodes; a
    cluster's index or a non-flat one is refused in one line."""
    from bm25aug.search.augmented import AugmentedSearcher

    bm25 = sparse.bm25 if isinstance(sparse, AugmentedSearcher) else sparse
    if not isinstance(bm25.index, LuceneIndex):
        raise UserError("hybrid search encodes the stored documents of an index folder, and this index is on a "
                        "cluster; fix: pass the dataset's flat index folder")
    if bm25.meta.flavor != "flat":
        raise UserError(f"hybrid search fuses with a flat index's documents, and this index is {bm25.meta.flavor}; "
                        f"fix: pass a flat index folder (and a flat-target model)")
    return bm25.index
