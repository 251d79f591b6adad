"""The dense peer as a teacher: does all-MiniLM-L6-v2's ranking, learned from about a billion
sentence pairs, teach query weights that carry over to a corpus left out of training?

    python research/dense_teacher.py [--dense-temperature 0.05] TRAIN.PY-OPTIONS
    python research/dense_teacher.py --dataset nfcorpus squad --recipe general3 \
        --output-dir runs/general/loo-dense/no-scifact --resume

The general recipe's folds learn too little from two small corpora to help the third
(docs/results.md, "A general model"), while the dense peer's RRF hybrid with bm25-flat gains on all
three zero-shot. This runs train.py's training unchanged except for one term of the loss: the KL
divergence (weight ``--distill-weight``, 1 by default) from the dense model's softmax over each
batch's documents, its cosines divided by ``--dense-temperature``, to the student's BM25 softmax,
as ``--teacher`` does with a bm25aug model. The dense model reads the student's own token ids (the
same uncased vocabulary) and the corpus embeddings the dense peer caches. It is all-MiniLM-L6-v2,
named (``TEACHER``), not the dense peer's default (bge-small-en-v1.5): MiniLM reads a query's ids
as they are, while bge-small expects an instruction before each query, which the student's ids
lack. Evaluate the run with ``eval.py --transfer``, as the other leave-one-out candidates.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch

from bm25aug.cli import main as cli_main
from bm25aug.dense.embeddings import corpus_embeddings
from bm25aug.dense.loading import load_dense_model
from bm25aug.train import command
from bm25aug.train.corpora import TrainingCorpus
from bm25aug.train.trainer import Trainer


class DenseTeacherTrainer(Trainer):
    """train.py's trainer, with the dense peer's scores of each batch as the distillation target
    (its ``teacher_scores`` hook)."""

    temperature = 0.05  # sentence-transformers' contrastive scale of 20
    TEACHER = "all-MiniLM-L6-v2"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.dense = load_dense_model(self.TEACHER)
        self.doc_vectors = {c.name: torch.from_numpy(np.asarray(corpus_embeddings(c.bm25.index, self.dense)[0]))
                            for c in self.corpora}
        self._report_alignment()

    @torch.no_grad()
    def teacher_scores(self, corpus: TrainingCorpus, qb, rows: list[int]) -> torch.Tensor:
        """Queries x the batch's documents: cosine over the temperature."""
        ids, attention = (np.asarray(x, np.int64) for x in (qb.input_ids, qb.attention_mask))
        queries = torch.from_numpy(self.dense.embed_ids(ids, attention))
        return (queries @ self.doc_vectors[corpus.name][rows].T / self.temperature).to(self.device)

    def _report_alignment(self) -> None:
        """A check that rows and embeddings line up: queries sit closer to their positives than to
        random documents of their corpus."""
        for corpus in self.corpora:
            sample = corpus.examples[:64]
            qb = self.target.batch([e.query for e in sample])
            positives = [e.positives[0] for e in sample]
            rng = np.random.default_rng(0)
            others = rng.integers(0, corpus.bm25.num_docs, len(sample)).tolist()
            cos = self.teacher_scores(corpus, qb, positives + others) * self.temperature
            n = len(sample)
            print(f"dense teacher, {corpus.name}: cosine to the positive {cos[:, :n].diagonal().mean():.3f}, "
                  f"to a random document {cos[:, n:].diagonal().mean():.3f}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--dense-temperature", type=float, default=DenseTeacherTrainer.temperature)
    known, rest = parser.parse_known_args()
    DenseTeacherTrainer.temperature = known.dense_temperature
    command.Trainer = DenseTeacherTrainer  # train.py's command, with this trainer
    sys.exit(cli_main(["train", *rest]))


if __name__ == "__main__":
    main()
