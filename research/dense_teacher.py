"""A dense model, or the fused hybrid, as a distillation teacher of train.py's training.

    python research/dense_teacher.py [--dense-temperature 0.05] TRAIN.PY-OPTIONS
    python research/dense_teacher.py --dataset nfcorpus squad --recipe general3 \
        --output-dir runs/general/loo-dense/no-scifact --resume
    python research/dense_teacher.py --dense-model bge-small-en-v1.5-int8-corpus --dense-temperature 0.02 \
        --recipe general-open --seed 13 --output-dir runs/general-teacher/bge-s13 --resume
    python research/dense_teacher.py --dense-model bge-small-en-v1.5-int8-corpus --dense-temperature 0.02 \
        --fuse-with general --recipe general-open --seed 13 --output-dir runs/general-teacher/hybrid-s13 --resume

This runs train.py's training unchanged except for one term of the loss: the KL divergence (weight
``--distill-weight``, 1 by default) from the teacher's softmax over each batch's documents to the
student's BM25 softmax, as ``--teacher`` does with a bm25aug model. The teacher's logits:

* **Dense** (no ``--fuse-with``): the cosine of the query's and the document's vectors over
  ``--dense-temperature``. The document vectors are those the dense peer caches for the corpus.
* **The fused hybrid** (``--fuse-with MODEL`` with ``--dense-model``, e.g. the packaged ``general``): the model's
  term list of each training query, made once by its int8 ONNX encoder as search makes it (cached
  beside the query vectors), scored in torch's BM25 over the batch's documents (what Lucene gives
  the boosted term query). Per query, both scores are min-max normalized over the batch's documents
  and interpolated with
  ``--fusion-weight`` on the sparse side (the hybrid's default, 0.4), as the hybrid fuses its two
  lists. The result is rescaled to the row's cosine range, then divided by the temperature, so a
  weight of 0 is the dense teacher exactly.

The query side comes in two forms:

* With no ``--dense-model``, all-MiniLM-L6-v2 (``TEACHER``) reads the student's own token ids (the
  same uncased vocabulary). This is how the recorded leave-one-out run was made (docs/results.md).
* With ``--dense-model NAME`` (what ``load_dense_model`` takes), the model reads each training
  query's text as its own search reads it (bge-small: with its instruction). Every query of every
  training corpus is encoded once, before the first step. The vectors are cached under
  ``~/.cache/bm25aug/teacher-queries/``, keyed by the model's digest and the texts, so a second
  run, or a second seed, pays nothing (the cache keeps its 32 most recently used files). A
  batch's teacher scores are then a lookup, a product and, for the hybrid, one BM25 pass of the
  term lists in torch.

Evaluate a run with ``eval.py --transfer``, as the other zero-shot candidates.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from bm25aug.cli import main as cli_main
from bm25aug.errors import UserError
from bm25aug.dense.embeddings import corpus_embeddings
from bm25aug.dense.loading import load_dense_model
from bm25aug.io import CACHE_ROOT, atomic_open, atomic_write_text, digest, keep_recent_files, source_key
from bm25aug.model.encoder import encode_queries
from bm25aug.model.loading import load_encoder
from bm25aug.model.onnx_encoder import OnnxQueryEncoder
from bm25aug.progress import progress
from bm25aug.train import command
from bm25aug.train.corpora import TrainingCorpus
from bm25aug.train.trainer import Trainer

QUERY_CACHE = CACHE_ROOT / "teacher-queries"
QUERY_BATCH = 64
RECIPE = "teacher-queries 1"  # what a cached file holds; a change to how it is made changes this
CACHE_FILES = 32  # a training set's vectors and term lists (about 10 MB and 1 MB a set): 16 sets


def minmax(x: torch.Tensor) -> torch.Tensor:
    """Each row scaled to [0, 1] over its columns (a constant row: all 1, as the hybrid's ``side``)."""
    low, high = x.min(dim=1, keepdim=True).values, x.max(dim=1, keepdim=True).values
    span = high - low
    return torch.where(span > 0, (x - low) / span.clamp(min=1e-12), torch.ones_like(x))


def fused_logits(cosine: torch.Tensor, sparse: torch.Tensor, weight: float, temperature: float) -> torch.Tensor:
    """The hybrid teacher's logits: ``weight``·minmax(sparse) + (1-weight)·minmax(cosine), rescaled
    to each row's cosine range and divided by ``temperature`` (weight 0: ``cosine / temperature``
    up to a shift per row, which a softmax ignores)."""
    span = cosine.max(dim=1, keepdim=True).values - cosine.min(dim=1, keepdim=True).values
    return span * (weight * minmax(sparse) + (1.0 - weight) * minmax(cosine)) / temperature


def query_vectors(model, texts: list[str]) -> np.ndarray:
    """``model``'s query vectors of ``texts`` (one row each), cached by the model's digest and the texts."""
    key = source_key("teacher-queries", RECIPE, model.digest, texts)
    path = QUERY_CACHE / f"{key}.npy"
    try:
        vectors = np.load(path)
        if vectors.shape[0] == len(texts):
            os.utime(path)
            return vectors
    except (OSError, ValueError):  # none yet, or a damaged one: made again
        pass
    rows = [model.encode_queries(texts[at:at + QUERY_BATCH])
            for at in progress(range(0, len(texts), QUERY_BATCH), desc=f"teacher queries ({model.name})", unit="batch")]
    vectors = np.concatenate(rows).astype(np.float32) if rows else np.zeros((0, 0), np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path) as f:
        np.save(f, vectors)
    keep_recent_files(QUERY_CACHE, CACHE_FILES)
    return vectors


def term_lists(encoder, texts: list[str]) -> list[dict[str, float]]:
    """``encoder``'s term list of each text (as search makes it), cached by its export's digest and the texts."""
    key = source_key("teacher-terms", RECIPE, digest(encoder.onnx_path), json.dumps(asdict(encoder.config), sort_keys=True),
                     digest(encoder.tokenizer.backend_tokenizer.to_str().encode()), texts)
    path = QUERY_CACHE / f"{key}.json"
    try:
        lists = json.loads(path.read_text())
        if isinstance(lists, list) and len(lists) == len(texts):
            os.utime(path)
            return lists
    except (OSError, ValueError):  # none yet, or a damaged one: made again
        pass
    lists = encode_queries(encoder, texts, progress=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(lists))
    keep_recent_files(QUERY_CACHE, CACHE_FILES)
    return lists


def column_list(bm25, terms: dict[str, float]) -> tuple[torch.Tensor, torch.Tensor]:
    """A term list as the index's columns and their boosts (a term the index lacks matches nothing)."""
    found = [(bm25.columns[t], w) for t, w in terms.items() if t in bm25.columns]
    return torch.tensor([c for c, _ in found], dtype=torch.long), torch.tensor([w for _, w in found], dtype=torch.float32)


def list_scores(bm25, lists: list[tuple[torch.Tensor, torch.Tensor]], rows: list[int],
                device: torch.device | str = "cpu") -> torch.Tensor:
    """Term lists (``column_list``'s) x ``rows``: their BM25 in torch (``TorchBM25.score`` over the
    index's columns), which is Lucene's score of the boosted term queries."""
    boosts = torch.zeros(len(lists), len(bm25.idf))
    for i, (columns, weights) in enumerate(lists):
        boosts[i].index_add_(0, columns, weights)
    return bm25.score(boosts.to(device), rows)


class DenseTeacherTrainer(Trainer):
    """train.py's trainer, with a dense model's scores of each batch (fused with ``--fuse-with``'s
    when one is given) as the distillation target (its ``teacher_scores`` hook). ``--teacher`` is
    refused: this trainer's teacher replaces it."""

    temperature = 0.05  # sentence-transformers' contrastive scale of 20
    TEACHER = "all-MiniLM-L6-v2"
    dense_model: str | None = None  # None: TEACHER on the student's ids; a name: that model on the query texts
    fusion_weight = 0.4  # the sparse side's, as the hybrid's default
    fuse_with: str | None = None  # a bm25aug model whose BM25 scores are fused with the dense ones

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.teacher is not None:
            raise UserError("this trainer's teacher is the dense model (with --fuse-with, the hybrid), so --teacher "
                            "would be ignored; fix: pass the bm25aug model as --fuse-with MODEL")
        self.dense = load_dense_model(self.dense_model or self.TEACHER)
        self.doc_vectors = {c.name: torch.from_numpy(np.asarray(corpus_embeddings(c.bm25.index, self.dense)[0]))
                            for c in self.corpora}
        self.query_rows: dict[str, dict[str, int]] = {}
        self.query_vectors: dict[str, torch.Tensor] = {}
        if self.dense_model:
            for c in self.corpora:
                texts = sorted({e.query for e in c.examples})
                self.query_rows[c.name] = {t: i for i, t in enumerate(texts)}
                self.query_vectors[c.name] = torch.from_numpy(query_vectors(self.dense, texts))
        self.sparse_lists: dict[str, list[dict[str, float]]] = {}
        if self.fuse_with:
            if not self.dense_model:
                raise SystemExit("--fuse-with needs --dense-model (the query texts are what both teachers read)")
            encoder = load_encoder(self.fuse_with, "onnx-int8")
            if not isinstance(encoder, OnnxQueryEncoder) or encoder.config.target != self.config.target:
                raise UserError(f"--fuse-with {self.fuse_with} is not a contextual model of the {self.config.target} "
                                f"target this run trains; fix: pass one (e.g. general, for the flat target)")
            for c in self.corpora:
                lists = term_lists(encoder, list(self.query_rows[c.name]))
                self.sparse_lists[c.name] = [column_list(c.bm25, terms) for terms in lists]
        self._batch_queries: list[str] = []
        self._report_alignment()

    def training_step(self, batch, rng):
        self._batch_queries = [e.query for e in batch]  # the texts the cached query vectors are keyed by
        return super().training_step(batch, rng)

    @torch.no_grad()
    def cosines(self, corpus: TrainingCorpus, qb, rows: list[int]) -> torch.Tensor:
        """Queries x the batch's documents: the dense model's cosines."""
        if self.dense_model:
            at = self.query_rows[corpus.name]
            queries = self.query_vectors[corpus.name][[at[t] for t in self._batch_queries]]
        else:
            ids, attention = (np.asarray(x, np.int64) for x in (qb.input_ids, qb.attention_mask))
            queries = torch.from_numpy(self.dense.embed_ids(ids, attention))
        return queries @ self.doc_vectors[corpus.name][rows].T

    @torch.no_grad()
    def sparse_scores(self, corpus: TrainingCorpus, rows: list[int]) -> torch.Tensor:
        """Queries x the batch's documents: BM25 of ``--fuse-with``'s term lists (Lucene's score
        of the boosted term queries, as the hybrid's sparse side)."""
        at, lists = self.query_rows[corpus.name], self.sparse_lists[corpus.name]
        return list_scores(corpus.bm25, [lists[at[t]] for t in self._batch_queries], rows, self.device)

    @torch.no_grad()
    def teacher_scores(self, corpus: TrainingCorpus, qb, rows: list[int]) -> torch.Tensor:
        """Queries x the batch's documents: the teacher's logits (see the module's docstring)."""
        cosine = self.cosines(corpus, qb, rows).to(self.device)
        if not self.fuse_with:
            return cosine / self.temperature
        return fused_logits(cosine, self.sparse_scores(corpus, rows), self.fusion_weight, self.temperature)

    def _report_alignment(self) -> None:
        """A check that rows and embeddings line up: queries sit closer to their positives than to
        random documents of their corpus."""
        for corpus in self.corpora:
            sample = corpus.examples[:64]
            self._batch_queries = [e.query for e in sample]
            qb = self.target.batch(self._batch_queries)
            positives = [e.positives[0] for e in sample]
            rng = np.random.default_rng(0)
            others = rng.integers(0, corpus.bm25.num_docs, len(sample)).tolist()
            cos = self.cosines(corpus, qb, positives + others)
            n = len(sample)
            print(f"dense teacher, {corpus.name}: cosine to the positive {cos[:, :n].diagonal().mean():.3f}, "
                  f"to a random document {cos[:, n:].diagonal().mean():.3f}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--dense-temperature", type=float, default=DenseTeacherTrainer.temperature)
    parser.add_argument("--dense-model", default=None)
    parser.add_argument("--fusion-weight", type=float, default=DenseTeacherTrainer.fusion_weight)
    parser.add_argument("--fuse-with", default=None)
    known, rest = parser.parse_known_args()
    DenseTeacherTrainer.temperature = known.dense_temperature
    DenseTeacherTrainer.dense_model = known.dense_model
    DenseTeacherTrainer.fusion_weight = known.fusion_weight
    DenseTeacherTrainer.fuse_with = known.fuse_with
    command.Trainer = DenseTeacherTrainer  # train.py's command, with this trainer
    sys.exit(cli_main(["train", *rest]))


if __name__ == "__main__":
    main()
