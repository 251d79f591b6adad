"""An inference-free general query side: each query word's weight from static vectors and a tiny head.

The contextual general model (``general``) learns how much each query word matters, and its weights
depend on the rest of the query. A table of its mean weight per word keeps none of its gain on
corpora it never saw (issue 51). This model reads the same context cheaply, with no encoder:

* Every whitespace chunk of the query (a word, with its punctuation) is its WordPiece pieces; its
  vector is the mean of the pieces' static vectors: the encoder's word embeddings, projected to
  ``dim`` dimensions (``vectors``, one row per vocabulary entry, so a word no training query had
  still gets a vector from its pieces). Only the analyzer's terms of a chunk get a weight, as the
  flat index holds them; stopwords still count as context.
* A chunk's weight is ``exp(max(y, 0))`` (the floor 1 is BM25's own weight, the contextual
  model's ``weight_floor``), with ``y = v · relu(W [x_j, x_{j-1}, x_{j+1}, j/m, 1/m] + U ctx + c) + d``:
  the chunk's vector, its neighbours', its position among the query's ``m`` chunks, and ``ctx``,
  the mean of every piece's vector in the query.
* A query term's boost is the sum over its occurrences, as bm25-flat counts repeats. Nothing is
  added: the contextual general model adds almost nothing either (0.1-0.3 terms a query).

It is fitted to the contextual model's weights (``bm25aug.train.reweighter``). A query costs a
whitespace split, one cache lookup per chunk (the analyzer and the tokenizer run once per chunk
ever seen) and a few small matrix products. A folder holds ``bm25aug_config.json``
(``query_side: reweighter``), ``reweighter.safetensors`` (the vectors and the head), the
tokenizer's files and ``fit.json`` (how it was fitted).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np

from bm25aug.errors import UserError
from bm25aug.lucene.analysis import CHUNK_CACHE, CHUNK_CHARS, chunk_terms  # the analyzer's chunk cache, its bounds too
from bm25aug.model.config import CONFIG_NAME, AugmenterConfig
from bm25aug.model.encoder import QueryEncoder

WEIGHTS_FILE = "reweighter.safetensors"
TOKENIZER_FILE = "tokenizer.json"
QUERY_SIDE = "reweighter"
HEAD = ("w_self", "w_left", "w_right", "w_position", "w_context", "bias", "v", "v_bias")


def refit(folder) -> str:
    """The fix for a damaged reweighter folder."""
    return (f"fix: fit it again with the settings its fit.json records (python -m bm25aug.train.reweighter "
            f"--output-dir {folder} ...)")


def chunk_positions(count: int) -> np.ndarray:
    """``[j/m, 1/m]`` for each of a query's ``m`` chunks (m x 2, float32)."""
    j = np.arange(count, dtype=np.float32)
    return np.stack([j / count, np.full(count, 1 / count, np.float32)], axis=1) if count else np.zeros((0, 2), np.float32)


def neighbours(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's left and right neighbour (a zero row past either end), for numpy or torch rows."""
    zero = x[:1] * 0
    if isinstance(x, np.ndarray):
        return np.concatenate([zero, x[:-1]]), np.concatenate([x[1:], zero])
    import torch

    return torch.cat([zero, x[:-1]]), torch.cat([x[1:], zero])


class Reweighter(QueryEncoder):
    """The runtime: ``encode_batch`` in numpy, float32, from a folder's tables."""

    batch_exact = True  # a query's weights never depend on its batch

    def __init__(self, config: AugmenterConfig, tokenizer, tables: dict[str, np.ndarray], path: Path | None = None):
        missing = [name for name in ("vectors", *HEAD) if name not in tables]
        if missing:
            raise UserError(f"the reweighter in {path} lacks {', '.join(missing)}; {refit(path)}")
        self.config, self.tokenizer, self.path = config, tokenizer, path
        self.vectors = np.asarray(tables["vectors"], np.float32)
        self.head = {name: np.asarray(tables[name], np.float32) for name in HEAD}
        self._chunks: dict[str, tuple] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_folder(cls, folder: str | Path) -> "Reweighter":
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = Path(folder)
        config = AugmenterConfig.load(folder)
        if config.query_side != QUERY_SIDE:
            raise UserError(f"{folder} holds a {config.query_side} model, not a reweighter; fix: load it with "
                            f"bm25aug.model.onnx_encoder.load_encoder")
        try:
            tables = load_file(str(folder / WEIGHTS_FILE))
            tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        except Exception as e:  # safetensors and tokenizers raise their own types for a damaged file
            raise UserError(f"the reweighter in {folder} cannot be read ({type(e).__name__}: {str(e)[:120]}); "
                            f"{refit(folder)}") from None
        bad = [name for name, t in tables.items() if not np.isfinite(t).all()]
        if bad:
            raise UserError(f"NaN or infinite values in {', '.join(bad)} of {folder / WEIGHTS_FILE}; {refit(folder)}")
        return cls(config, tokenizer, tables, folder)

    # -------------------------------------------------------------------------------- features
    def chunk(self, chunk: str) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, int]:
        """A chunk's analyzed terms, the mean and the sum of its pieces' vectors, and its piece
        count; kept for chunks up to ``CHUNK_CHARS`` characters, so each is analyzed once."""
        found = self._chunks.get(chunk)
        if found is None:
            pieces = self.tokenizer.encode(chunk, add_special_tokens=False).ids
            rows = self.vectors[pieces] if pieces else np.zeros((1, self.vectors.shape[1]), np.float32)
            found = (chunk_terms(chunk), rows.mean(axis=0), rows.sum(axis=0), len(pieces))
            if len(chunk) <= CHUNK_CHARS:
                with self._lock:
                    if len(self._chunks) >= CHUNK_CACHE:
                        self._chunks.clear()
                    self._chunks[chunk] = found
        return found

    def chunk_weights(self, x: np.ndarray, context: np.ndarray) -> np.ndarray:
        """Each chunk's weight (m), from its vectors ``x`` (m x dim) and the query's ``context``."""
        h = self.head
        left, right = neighbours(x)
        pre = (x @ h["w_self"] + left @ h["w_left"] + right @ h["w_right"] + chunk_positions(len(x)) @ h["w_position"]
               + context @ h["w_context"] + h["bias"])
        y = np.maximum(pre, 0) @ h["v"] + h["v_bias"]
        return np.exp(np.maximum(y, 0), dtype=np.float32)

    def encode_batch(self, texts: list[str], feedback: list[str] | None = None) -> list[dict[str, float]]:
        return [self._term_list(text) for text in texts]

    def _term_list(self, text: str) -> dict[str, float]:
        chunks = [self.chunk(c) for c in text.split()]
        if not any(c[0] for c in chunks):
            return {}
        x = np.stack([c[1] for c in chunks])
        context = sum(c[2] for c in chunks) / max(sum(c[3] for c in chunks), 1)
        weights = self.chunk_weights(x, context.astype(np.float32))
        boosts: dict[str, float] = {}
        for (terms, *_), weight in zip(chunks, weights.tolist()):
            for term in terms:
                boosts[term] = boosts.get(term, 0.0) + weight
        return {t: boosts[t] for t in sorted(boosts)}


def write_folder(folder: Path, tables: dict[str, np.ndarray], tokenizer_dir: Path, config: AugmenterConfig) -> None:
    """A reweighter's files into ``folder`` (a fresh folder being built): the tables (vectors in
    float16, which halves the folder; the runtime computes in float32), the config and the tokenizer."""
    from safetensors.numpy import save_file

    save_file({name: (t.astype(np.float16) if name == "vectors" else t.astype(np.float32))
               for name, t in tables.items()}, str(folder / WEIGHTS_FILE))
    (folder / WEIGHTS_FILE).chmod(0o644)  # safetensors writes it private; a package ships it readable
    for file in tokenizer_dir.iterdir():
        if file.name.startswith(("tokenizer", "special_tokens", "vocab")):
            (folder / file.name).write_bytes(file.read_bytes())
    config.query_side = QUERY_SIDE
    (folder / CONFIG_NAME).write_text(json.dumps(config.__dict__, indent=2), encoding="utf-8")
