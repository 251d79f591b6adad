"""The query-encoder interface: what searchers, export and evaluation need from a query model.

As Pyserini's query encoders, an encoder turns one query into a weighted term list,
``encode(text) -> {term: weight}``, for the index flavor it was trained for (``config.target``).
Both runtimes implement it: the torch ``QueryAugmenter`` (the reference) and the int8
``OnnxQueryEncoder`` that search uses. ``encode_batch`` is each runtime's own batched pass.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, TypeVar

from bm25aug.errors import UserError
from bm25aug.limits import MIN_TERM_WEIGHT, check
from bm25aug.progress import progress as progress_bar

if TYPE_CHECKING:
    from bm25aug.model.config import AugmenterConfig

T, R = TypeVar("T"), TypeVar("R")


class QueryEncoder(ABC):
    """A query model as searchers use it. ``config`` is its ``AugmenterConfig`` (its target, gate
    and vocabulary), ``tokenizer`` its WordPiece tokenizer, ``path`` the folder it was loaded from
    (an output must never land there), or None."""

    config: AugmenterConfig
    tokenizer: object
    path: Path | None = None
    # Whether a query's terms are the same in a batch as alone (up to float rounding): fp32, yes;
    # the int8 runtimes quantize each batch's activations with one scale, so its neighbours count.
    batch_exact: bool = True
    # A light encoder (the static table, the reweighter) encodes in numpy under the GIL, each query
    # exactly as alone: more threads only contend for the GIL, and a batch may be cut anywhere.
    light: bool = False

    @abstractmethod
    def encode_batch(self, texts: list[str], feedback: list[str] | None = None) -> list[dict[str, float]]:
        """Term lists ``{term: boost}`` (zeros dropped) of the target's index, one per text;
        ``feedback``: per text, what a learned-feedback model reads after it (``Target.read``)."""

    def encode(self, text: str) -> dict[str, float]:
        """One query's term list, encoded alone: its terms never depend on batch neighbours
        (padding and, in the int8 runtimes, per-batch activation scales would change them)."""
        if not isinstance(text, str):
            raise UserError(f"encode takes one query as a string, not {type(text).__name__}; fix: pass the text, "
                            f"or use encode_batch for a list of queries")
        return self.encode_batch([text])[0]


def prune(terms: dict[str, float], top_k: int | None = None, threshold: float = 0.0) -> dict[str, float]:
    """Drop weights <= threshold, then keep the ``top_k`` heaviest (ties broken by term). A weight
    below ``MIN_TERM_WEIGHT`` (float32's smallest normal number) is dropped too: Lucene's boost
    cannot hold it as given (it adds under 1e-37 to a score), and the term-list rule refuses it."""
    kept = sorted((-w, t) for t, w in terms.items() if w > threshold and w >= MIN_TERM_WEIGHT)
    return {t: -w for w, t in (kept[:top_k] if top_k else kept)}


BATCH = 32  # queries a forward pass
WINDOW = 256  # queries sorted by length together, so that a batch pads little


def encode_queries(encoder: QueryEncoder, queries: list[str], top_k: int | None = None, threshold: float = 0.0,
                   progress: bool = True, batch_size: int | None = None, threads: int = 1) -> list[dict[str, float]]:
    """Each query's pruned term list, ``batch_size`` queries a pass (default: a whole window where
    the encoder is ``light``, ``BATCH`` where it is ``batch_exact``, else 1, so that every query
    gets the terms ``encode`` gives it).
    Each ``WINDOW`` queries from the first are sorted by length and cut into batches, so a query's
    neighbours depend only on its window (export and batch search, which searches in windows,
    encode alike). In int8 batches they move its weights within the bound
    ``tests/test_fast_encoder.py`` sets against fp32, and SciFact's nDCG@10 by -0.007 to +0.002
    (docs/search.md). A window's batches are encoded on ``threads`` threads (``map_threads``; a
    ``light`` encoder's on one): each batch is the same pass on any thread, so ``threads`` never
    changes a term list."""
    check("top_k", top_k)
    check("threshold", threshold)
    check("threads", threads)
    batch = check("encode_batch_size", batch_size) or (WINDOW if cut_anywhere(encoder) else BATCH if encoder.batch_exact else 1)
    if (bad := next((q for q in queries if not isinstance(q, str)), None)) is not None:
        raise UserError(f"a query is a {type(bad).__name__}, not a string; fix: pass query texts")
    lists: list[dict[str, float]] = [{} for _ in queries]

    def encode(at: list[int]) -> list[dict[str, float]]:
        return [prune(terms, top_k, threshold) for terms in encoder.encode_batch([queries[i] for i in at])]

    with progress_bar(total=len(queries), desc="augment queries", unit="q", disable=not progress) as bar:
        for start in range(0, len(queries), WINDOW):
            window = sorted(range(start, min(start + WINDOW, len(queries))), key=lambda i: len(queries[i]))
            batches = [window[b:b + batch] for b in range(0, len(window), batch)]
            for at, encoded in zip(batches, map_threads(encode, batches, 1 if encoder.light else threads)):
                for i, terms in zip(at, encoded):
                    lists[i] = terms
                bar.update(len(at))
    return lists


def cut_anywhere(encoder: QueryEncoder) -> bool:
    """Whether a batch of ``encoder``'s may be cut into passes of any size: a light encoder whose
    lists never depend on their batch (its passes are then as large as the caller's chunk)."""
    return encoder.light and encoder.batch_exact


def map_threads(fn: Callable[[T], R], items: Iterable[T], threads: int) -> Iterator[R]:
    """``map(fn, items)``, in order; with ``threads`` > 1 on that many threads of a pool kept for the
    process. Worth it where ``fn`` spends its time outside the GIL: ONNX Runtime's ``run`` (most
    of an int8 query's encoding) and the Rust tokenizer release it; the flat target's Lucene
    analysis holds ``JNI_LOCK`` and the GIL (about a tenth of a query). An error or a Ctrl-C in
    the caller cancels the items not started."""
    return map(fn, items) if threads == 1 else _pool(threads).map(fn, items)


_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def _pool(threads: int) -> ThreadPoolExecutor:
    """A pool of ``threads`` workers, made once per size: a thread that calls Java is attached to
    the JVM for its life (pyjnius never detaches it), so threads made per call would leak."""
    with _pools_lock:
        if (pool := _pools.get(threads)) is None:
            pool = _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix=f"bm25aug-encode{threads}")
        return pool
