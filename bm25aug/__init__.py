"""bm25aug: BM25 query augmentation learned end-to-end (Chen & Wiseman), on stock Lucene indexes."""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["AugmentedSearcher", "BM25Searcher", "HybridSearcher", "QueryAugmenter", "load_dataset"]


def __getattr__(name: str):
    """Lazy exports: ``import bm25aug`` neither starts the JVM nor imports torch."""
    if name == "AugmentedSearcher":
        from bm25aug.search.augmented import AugmentedSearcher

        return AugmentedSearcher
    if name == "BM25Searcher":
        from bm25aug.search.bm25 import BM25Searcher

        return BM25Searcher
    if name == "HybridSearcher":
        from bm25aug.search.hybrid import HybridSearcher

        return HybridSearcher
    if name == "QueryAugmenter":
        from bm25aug.model.augmenter import QueryAugmenter

        return QueryAugmenter
    if name == "load_dataset":
        from bm25aug.data.registry import load_dataset

        return load_dataset
    raise AttributeError(f"module 'bm25aug' has no attribute {name!r}")
