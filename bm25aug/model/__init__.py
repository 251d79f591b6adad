"""The query model: the augmenter, what its outputs become on an index, and its runtimes."""

from __future__ import annotations

import importlib

_EXPORTS = {"AugmenterConfig": "bm25aug.model.config", "QueryAugmenter": "bm25aug.model.augmenter", "QueryEncoder": "bm25aug.model.encoder", "load_encoder": "bm25aug.model.loading", "export_term_lists": "bm25aug.model.export"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Lazy exports, as ``from bm25aug.search import AugmentedSearcher`` (nothing heavy is imported before)."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
