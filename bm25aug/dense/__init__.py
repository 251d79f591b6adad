"""The dense peer's models (``models``, ``loading``), their pinned fetch (``fetch``) and the
corpus embeddings they make (``embeddings``); searching them is ``bm25aug.search.dense``."""

from bm25aug.dense.loading import load_dense_model
from bm25aug.dense.models import DEFAULT_DENSE_MODEL, KINDS, DenseModel

__all__ = ["DEFAULT_DENSE_MODEL", "KINDS", "DenseModel", "load_dense_model"]
