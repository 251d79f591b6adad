"""Training toward the teacher: the trainer of ``bm25aug.train`` on pseudo-queries, with a loss
over each query's own BM25 candidates instead of a judged positive.

Each step takes ``candidates`` of each query's BM25 top ``negative_depth`` (the trainer's mined
"hard negatives": the document the query was made from is left out), scores the batch through
torch BM25 as training always does, and compares each query's candidate scores with the
target's: the listwise KL divergence from the target's softmax (``kl``) or the mean squared error
of all score differences within the list (``margin-mse``, GPL's loss). BM25 scores and the
teacher's logits live on different scales, so the student's scores are divided by one number fixed
before training: the median ratio of plain BM25's spread of scores within a list to the teacher's
(``scale``). The target is ``(1 - mix)`` x the teacher's logits + ``mix`` x plain BM25's scores
over that ratio (``AdaptConfig.mix``). The df-weighted L1 and FLOPS terms on a(q) are training's own.
"""

from __future__ import annotations

import logging
import random

import numpy as np
import torch

from bm25aug.adapt.config import AdaptConfig
from bm25aug.adapt.gate import mixed, spread_ratio
from bm25aug.adapt.queries import PREFIX, as_split
from bm25aug.data.layouts import Split
from bm25aug.train.corpora import TrainingCorpus
from bm25aug.train.examples import Example
from bm25aug.train.trainer import Trainer

log = logging.getLogger(__name__)


class PseudoDataset:
    """What the trainer reads of a dataset, made of a ``Source`` and pseudo-queries: training
    queries that judge the document each was made from, and the teacher-judged dev split."""

    layout, is_qa = "adapt", False

    def __init__(self, source, train: dict[str, str], dev: Split):
        self.name, self.path, self.corpus = source.name, source.path, source.corpus
        self.corpus_file = source.path
        self.train, self.dev = as_split(train), dev

    def train_dev(self, dev_size: int, seed: int) -> tuple[Split, Split, str]:
        return self.train, self.dev, f"held-out pseudo-queries judged by the teacher ({len(self.dev.queries)} queries)"


class AdaptTrainer(Trainer):
    """``Trainer`` through its hooks: ``batch_rows`` draws each query's candidates and
    ``score_loss`` compares their scores with the teacher's (module docstring)."""

    def __init__(self, config, dataset: PseudoDataset, index, teacher, adapt: AdaptConfig, resume: bool = False):
        self.adapt = adapt
        super().__init__(config, dataset, index, resume=resume)
        corpus = self.corpora[0]
        examples = corpus.examples
        logits = [np.asarray(s, np.float32) / adapt.teacher_temperature
                  for s in teacher.scores([e.query for e in examples], [e.negatives for e in examples])]
        bm25 = self.plain_scores(corpus, examples)
        self.scale = spread_ratio(logits, bm25)
        if adapt.mix:
            logits = mixed(logits, bm25, adapt.mix, self.scale)
        self.teacher_lists = {e.qid: torch.from_numpy(np.asarray(s, np.float32)) for e, s in zip(examples, logits)}
        log.info("adapt: %d pseudo-queries, %.1f candidates each on average; student scores / %.3f",
                 len(examples), float(np.mean([len(e.negatives) for e in examples])), self.scale)

    def dev_hits(self, corpus: TrainingCorpus, qid: str, top) -> list:
        """The gate's run leaves out the document each held-out pseudo-query was cut from, as its
        judgements do: ranked first by BM25 and unjudged, it would count against every run, most
        against one that keeps exact matches on top."""
        source = qid[len(PREFIX):]
        return [h for h in corpus.searcher.hits(top) if h.docid != source]

    @torch.no_grad()
    def plain_scores(self, corpus: TrainingCorpus, examples: list[Example]) -> list[np.ndarray]:
        """Plain BM25's scores of each example's candidates, through torch BM25."""
        out = []
        for at in range(0, len(examples), 32):
            batch = examples[at:at + 32]
            rows = [r for e in batch for r in e.negatives]
            scores = corpus.bm25.score(self.plain_boosts(corpus, [e.query for e in batch]), rows).cpu().numpy() \
                if rows else None
            start = 0
            for i, e in enumerate(batch):
                out.append(scores[i, start:start + len(e.negatives)] if rows else np.zeros(0, np.float32))
                start += len(e.negatives)
        return out

    def plain_boosts(self, corpus: TrainingCorpus, queries: list[str]) -> torch.Tensor:
        """Plain BM25's boosts over the corpus's columns (each query term once per occurrence)."""
        qb = self.target.batch(queries)
        boosts = torch.zeros(len(queries), corpus.cmap.width)
        for i, terms in enumerate(qb.terms):
            for t in terms:
                if (col := corpus.cmap.columns.get(t, -1)) >= 0:
                    boosts[i, col] += 1
        return boosts.to(self.device)

    def batch_rows(self, corpus: TrainingCorpus, batch: list[Example], rng: random.Random) -> list[int]:
        """``candidates`` of each query's list, drawn at random; a short list is padded (masked)."""
        m = self.adapt.candidates
        rows, teacher, valid = [], torch.full((len(batch), m), -1e4), torch.zeros(len(batch), m, dtype=torch.bool)
        for i, e in enumerate(batch):
            pool = e.negatives or e.positives
            picked = sorted(rng.sample(range(len(pool)), min(m, len(pool))))
            rows += [pool[j] for j in picked] + [pool[0]] * (m - len(picked))
            if e.negatives:
                teacher[i, :len(picked)] = self.teacher_lists[e.qid][picked]
                valid[i, :len(picked)] = True
        self._lists = teacher.to(self.device), valid.to(self.device)
        return rows

    def score_loss(self, corpus: TrainingCorpus, qb, boosts: torch.Tensor, a: torch.Tensor, rows: list[int],
                   mask: torch.Tensor, relevant: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """The teacher term over each query's own candidates, plus training's L1 and FLOPS on a(q)."""
        n, m = boosts.shape[0], self.adapt.candidates
        scores = corpus.bm25.score(boosts, rows).view(n, n, m)[torch.arange(n), torch.arange(n)] / self.scale
        teacher, valid = self._lists
        distill = self.list_loss(scores, teacher, valid)
        reg = corpus.loss.l1(a, relevant)
        loss = distill + corpus.loss.lam * reg
        parts = {"rank": distill.detach(), "reg": reg.detach()}
        if corpus.loss.flops:
            flops = corpus.loss.flops_loss(a)
            loss = loss + corpus.loss.flops * flops
            parts["flops"] = flops.detach()
        return {"loss": loss, **parts}

    def list_loss(self, student: torch.Tensor, teacher: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        rows = valid.sum(1) > 1  # a list of one orders nothing
        if not bool(rows.any()):
            return student.sum() * 0
        student, teacher, valid = student[rows], teacher[rows], valid[rows]
        if self.adapt.loss == "kl":
            return self.corpora[0].loss.distillation(student, teacher, ~valid)
        # margin MSE over every pair (i, j) of a list: the mean of ((s_i - s_j) - (t_i - t_j))^2
        d = torch.where(valid, student - teacher, torch.zeros_like(student))
        count = valid.sum(1, keepdim=True).float()
        centred = torch.where(valid, d - d.sum(1, keepdim=True) / count, torch.zeros_like(d))
        return (2 * centred.square().sum(1) / count.squeeze(1)).mean()
