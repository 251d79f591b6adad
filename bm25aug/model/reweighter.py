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
# Chunks whose projections are kept: each holds 4 x hidden floats (2 KB at hidden 128), so a quarter
# of the analyzer's chunk count keeps the bytes an entry of two dim-64 vectors took.
PROJECTED_CACHE = CHUNK_CACHE // 4
HEAD = ("w_self", "w_left", "w_right", "w_position", "w_context", "bias", "v", "v_bias")


def refit(folder) -> str:
    """The fix for a damaged reweighter folder."""
    return (f"fix: fit it again with the settings its fit.json records (python -m bm25aug.train.reweighter "
            f"--output-dir {folder} ...)")


def chunk_positions(sizes) -> np.ndarray:
    """``[j/m, 1/m]`` for each chunk j of queries of ``m`` chunks each (``sizes``, or one query's
    count), the queries' chunks in a row (n x 2, float32): what fitting and search both read."""
    sizes = np.atleast_1d(np.asarray(sizes, np.int64))
    m = np.repeat(sizes, sizes).astype(np.float32)
    j = (np.arange(len(m)) - np.repeat(np.cumsum(sizes) - sizes, sizes)).astype(np.float32)
    return np.stack([j / m, 1 / m], axis=1)


class Reweighter(QueryEncoder):
    """The runtime: ``encode_batch`` in numpy, float32, from a folder's tables."""

    batch_exact = True  # a query's weights never depend on its batch
    light = True  # numpy under the GIL

    def __init__(self, config: AugmenterConfig, tokenizer, tables: dict[str, np.ndarray], path: Path | None = None):
        missing = [name for name in ("vectors", *HEAD) if name not in tables]
        if missing:
            raise UserError(f"the reweighter in {path} lacks {', '.join(missing)}; {refit(path)}")
        self.config, self.tokenizer, self.path = config, tokenizer, path
        self.vectors = np.asarray(tables["vectors"], np.float32)
        self.head = {name: np.asarray(tables[name], np.float32) for name in HEAD}
        self._store = _Projections(len(self.head["v"]))
        self._lock = threading.Lock()

    @classmethod
    def from_folder(cls, folder: str | Path) -> "Reweighter":
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        folder = Path(folder)
        config = AugmenterConfig.load(folder)
        if config.query_side != QUERY_SIDE:
            raise UserError(f"{folder} holds a {config.query_side} model, not a reweighter; fix: load it with "
                            f"bm25aug.model.loading.load_encoder")
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
        """A chunk's analyzed terms, the mean and the sum of its pieces' vectors, and its piece count
        (what fitting reads: ``bm25aug.train.reweighter``)."""
        pieces = self.tokenizer.encode(chunk, add_special_tokens=False).ids
        rows = self.vectors[pieces] if pieces else np.zeros((1, self.vectors.shape[1]), np.float32)
        return chunk_terms(chunk), rows.mean(axis=0), rows.sum(axis=0), len(pieces)

    def projected(self, store: "_Projections", chunk: str) -> tuple[tuple[str, ...], int | np.ndarray, int]:
        """A chunk's terms, its row in ``store`` and its piece count. A chunk up to ``CHUNK_CHARS``
        characters is analyzed and projected once per store; a longer one (a URL, a pasted token)
        every time, its projections (4 x hidden) given in place of a row, never kept."""
        found = store.entries.get(chunk)
        if found is None:
            terms, mean, total, count = self.chunk(chunk)
            h = self.head
            parts = np.stack([mean @ h["w_self"] + h["bias"], mean @ h["w_left"], mean @ h["w_right"],
                              total @ h["w_context"]]).astype(np.float32)
            if len(chunk) > CHUNK_CHARS:
                return terms, parts, count
            with self._lock:
                found = store.entries[chunk] = (terms, store.add(parts), count)
        return found

    def chunk_weights(self, parts: np.ndarray, sizes: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """Each chunk's weight, for the chunks of several queries in a row: ``parts`` (4 x n x hidden,
        ``_Projections``), each query's chunk count ``sizes`` and its piece count ``counts`` (queries
        with no chunk left out). Row by row the same arithmetic whatever the batch: a query's
        weights never depend on its neighbours (``batch_exact``)."""
        own, to_right, to_left, context = parts
        h = self.head
        starts = np.cumsum(sizes) - sizes
        left = np.concatenate([to_right[:1] * 0, to_right[:-1]])  # the chunk before's share, none at a query's start
        left[starts] = 0
        right = np.concatenate([to_left[1:], to_left[:1] * 0])
        right[starts + sizes - 1] = 0
        context = np.add.reduceat(context, starts, axis=0) / np.maximum(counts, 1).astype(np.float32)[:, None]
        position = h["w_position"]
        at = chunk_positions(sizes)
        pre = own + left + right + at[:, :1] * position[0] + at[:, 1:] * position[1]
        pre += np.repeat(context, sizes, axis=0)
        y = (np.maximum(pre, 0, out=pre) * h["v"]).sum(axis=1) + h["v_bias"]
        return np.exp(np.maximum(y, 0), dtype=np.float32)

    def encode_batch(self, texts: list[str], feedback: list[str] | None = None) -> list[dict[str, float]]:
        store = self._store
        if store.full():
            with self._lock:
                if self._store is store:
                    self._store = _Projections(len(self.head["v"]))
                store = self._store
        get = store.entries.get  # the known chunks looked up here, inline: most of a query's cost
        queries = [[get(c) or self.projected(store, c) for c in text.split()] for text in texts]
        live = [q for q in queries if any(c[0] for c in q)]  # a query with no analyzer term has no list
        if not live:
            return [{} for _ in texts]
        rows = [c[1] for q in live for c in q]
        sizes = np.array([len(q) for q in live])
        counts = np.array([sum(c[2] for c in q) for q in live])
        weights = iter(self.chunk_weights(gathered(store.table, rows), sizes, counts).tolist())
        lists = []
        for query in queries:
            boosts: dict[str, float] = {}
            if any(c[0] for c in query):
                for (terms, *_), weight in zip(query, weights):
                    for term in terms:
                        boosts[term] = boosts.get(term, 0.0) + weight
            lists.append({t: boosts[t] for t in sorted(boosts)})
        return lists


def gathered(table: np.ndarray, rows: list) -> np.ndarray:
    """The projections (4 x n x hidden) of chunks given as rows of ``table`` or as their own arrays."""
    if all(type(r) is int for r in rows):
        return table[:, rows]
    parts = table[:, [r if type(r) is int else 0 for r in rows]]
    for i, r in enumerate(rows):
        if type(r) is not int:
            parts[:, i] = r
    return parts


class _Projections:
    """Chunks' projections, one row each of ``table`` (4 x rows x hidden, float32), and ``entries``:
    chunk -> (terms, row, piece count). Rows are only added (under the reweighter's lock; a full
    table is copied into a larger one: twice its size up to ``PROJECTED_CACHE`` rows, then 1,024
    rows more, for the batch that crosses it), and a store that holds ``PROJECTED_CACHE`` rows is
    replaced by an empty one at the next batch, never cleared: a batch that looked its rows up in a
    store reads them from that store's table, whatever other threads do meanwhile."""

    def __init__(self, hidden: int):
        self.entries: dict[str, tuple] = {}
        self.table = np.zeros((4, min(1024, PROJECTED_CACHE), hidden), np.float32)
        self.used = 0

    def full(self) -> bool:
        return self.used >= PROJECTED_CACHE

    def add(self, parts: np.ndarray) -> int:
        if self.used == self.table.shape[1]:
            size = min(2 * self.used, PROJECTED_CACHE) if self.used < PROJECTED_CACHE else self.used + 1024
            grown = np.zeros((4, size, self.table.shape[2]), np.float32)
            grown[:, :self.used] = self.table
            self.table = grown
        self.table[:, self.used] = parts
        self.used += 1
        return self.used - 1


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
