"""Datasets: the registry of names and layouts, and corpora read without holding them in memory."""

from __future__ import annotations

import importlib

_EXPORTS = {"Dataset": "bm25aug.data.registry", "load_dataset": "bm25aug.data.registry", "Split": "bm25aug.data.layouts", "Corpus": "bm25aug.data.corpus"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    """Lazy exports, as ``from bm25aug.search import AugmentedSearcher`` (nothing heavy is imported before)."""
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
