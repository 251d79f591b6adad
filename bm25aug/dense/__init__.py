"""The dense peer's models (``models``, ``loading``), their pinned fetch (``fetch``) and the
corpus embeddings they make (``embeddings``), a query tower paired with a corpus model (``tower``,
made by ``bm25aug.train.tower_build``); the SPLADE peer's (``splade``, ``splade_fetch``,
``sparse_embeddings``); what both share: the pinned archive's fetch (``pinned``) and the resumable
corpus cache (``corpus_cache``). Searching them is ``bm25aug.search.dense`` and
``bm25aug.search.splade``."""

from bm25aug.dense.loading import load_dense_model
from bm25aug.dense.models import DEFAULT_DENSE_MODEL, KINDS, DenseModel

__all__ = ["DEFAULT_DENSE_MODEL", "KINDS", "DenseModel", "load_dense_model"]
