"""Searching an index: plain BM25, the augmented searcher, expansion peers and TREC run files."""

from __future__ import annotations

import importlib

_EXPORTS = {"AugmentedSearcher": "bm25aug.search.augmented", "AugmentedQuery": "bm25aug.search.augmented", "BM25Searcher": "bm25aug.search.bm25", "Hit": "bm25aug.search.hits", "Searcher": "bm25aug.search.hits", "DenseSearcher": "bm25aug.search.dense", "ExpansionSearcher": "bm25aug.search.peers", "HybridSearcher": "bm25aug.search.hybrid", "Fusion": "bm25aug.search.hybrid", "read_trec_run": "bm25aug.search.trec", "write_trec_run": "bm25aug.search.trec"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Lazy exports, as ``from bm25aug.search import AugmentedSearcher`` (nothing heavy is imported before)."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
