"""What training minimizes, as separate modules summed by ``AugmentationLoss`` (as sentence-
transformers' ``SpladeLoss`` wraps a ranking loss and ``FlopsLoss``).

* ``RankingLoss``: ``-log softmax(score(q, d+))`` over the positive, hard, random and in-batch
  negatives, the scores being BM25 in torch (``bm25aug.train.torch_bm25``).
* ``DfWeightedL1``: the paper's ``λ·penaltyᵀa`` with ``penalty = sqrt(df/N)`` of the index term
  an a(q) entry reaches, with two floors (``penalty_floor``; ``off_positive_penalty``).
* ``FlopsLoss``: SPLADE's FLOPS on a(q), the squared batch mean of each entry.
* ``DistillationLoss``: the KL divergence to a teacher's softmax over the same documents.
* ``OutputMatchLoss``: a student query model fitted to a teacher's outputs, w and a(q), with no
  documents (``bm25aug.train.distill``).
"""

from __future__ import annotations

import torch
from torch import nn


class RankingLoss(nn.Module):
    """Contrastive cross-entropy over a batch's documents; ``mask`` hides another query's positives."""

    def forward(self, scores: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(scores.masked_fill(mask, float("-inf")), targets)


class DfWeightedL1(nn.Module):
    """``penaltyᵀa`` per query, averaged. The penalty of a vocabulary entry is ``sqrt(df/N)`` of the
    index term it reaches (through the target's map for ``flat``), at least ``floor``: with
    sqrt(df/N) alone a term in one document of 5,000 costs 0.014, so rare terms the ranking loss
    never sees stay in a(q). Terms the index lacks can never match: they cost 1, so a(q) drops them.
    An entry whose term is in none of the query's judged-relevant documents costs at least
    ``off_positive`` (it can only raise other documents)."""

    def __init__(self, vocab_df: torch.Tensor, num_docs: int, uniform: bool = False, floor: float = 0.0,
                 off_positive: float = 0.0):
        super().__init__()
        h = vocab_df / num_docs
        penalty = torch.ones_like(h) if uniform else torch.where(h > 0, h.sqrt(), torch.ones_like(h))
        self.register_buffer("penalty", penalty.clamp(min=floor))
        self.off_positive = off_positive

    def forward(self, augmentation: torch.Tensor, relevant: torch.Tensor | None = None) -> torch.Tensor:
        penalty = self.penalty
        if self.off_positive and relevant is not None:
            penalty = torch.where(relevant, penalty, penalty.clamp(min=self.off_positive))
        return (augmentation * penalty).sum(dim=1).mean()


class FlopsLoss(nn.Module):
    """A word proposed for every query (a generic one) costs far more than one proposed for one."""

    def forward(self, augmentation: torch.Tensor) -> torch.Tensor:
        return augmentation.mean(dim=0).square().sum()


class DistillationLoss(nn.Module):
    """KL(teacher ‖ student) of the softmaxes over the batch's documents. Masked documents leave
    both; a large negative rather than -inf, so that 0·log 0 stays 0 in the divergence."""

    def forward(self, scores: torch.Tensor, teacher_scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        student, teacher = (x.masked_fill(mask, -1e4).log_softmax(dim=1) for x in (scores, teacher_scores))
        return nn.functional.kl_div(student, teacher, log_target=True, reduction="batchmean")


class AugmentationLoss(nn.Module):
    """``rank + λ·l1 (+ flops·FLOPS) (+ distill·KL)``; returns the total and each part (detached),
    as the training log records them (``rank``, ``reg``, ``flops``, ``distill``)."""

    def __init__(self, l1: DfWeightedL1, lam: float, flops: float = 0.0, distill: float = 1.0):
        super().__init__()
        self.ranking, self.l1, self.flops_loss, self.distillation = RankingLoss(), l1, FlopsLoss(), DistillationLoss()
        self.lam, self.flops, self.distill = lam, flops, distill

    @property
    def penalty(self) -> torch.Tensor:
        """The L1 penalty per vocabulary entry (before the off-positive floor)."""
        return self.l1.penalty

    def forward(self, augmentation: torch.Tensor, scores: torch.Tensor, targets: torch.Tensor,
                mask: torch.Tensor, relevant: torch.Tensor | None = None,
                teacher_scores: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """``scores``: BM25 of the batch's queries (rows) against its documents (columns);
        ``relevant`` (queries x vocabulary, bool): see ``DfWeightedL1``; ``teacher_scores``: the
        same shape as ``scores``, a teacher's."""
        rank = self.ranking(scores, targets, mask)
        reg = self.l1(augmentation, relevant)
        parts = {"loss": rank + self.lam * reg, "rank": rank.detach(), "reg": reg.detach()}
        if self.flops:
            flops = self.flops_loss(augmentation)
            parts.update(loss=parts["loss"] + self.flops * flops, flops=flops.detach())
        if teacher_scores is not None:
            distill = self.distillation(scores, teacher_scores, mask)
            parts.update(loss=parts["loss"] + self.distill * distill, distill=distill.detach())
        return parts


class OutputMatchLoss(nn.Module):
    """Squared error between a student's outputs and a teacher's, per query (summed over its
    tokens and a(q)'s entries), averaged over the batch; returns the total and each part.

    * w, on the query's tokens: where the teacher's w is above the weight floor, the difference;
      at or below it (search raises it to the floor), only the student's excess over the floor.
    * a(q), on the live entries, fitted on the student's logits (before the ReLU): the
      difference where the teacher's entry is positive, else the logit's excess over ``-margin``.
      The margin keeps what the teacher leaves out below zero by a clear step, so that int8
      rounding at search time proposes no term the teacher does not, and the augmentation gate
      (which counts positive entries) opens where the teacher's does. ``logits`` None (a w-only
      student, whose a ≡ 0): the a(q) part is zero."""

    def __init__(self, floor: float, margin: float = 0.1, aug_weight: float = 1.0):
        super().__init__()
        self.floor, self.margin, self.aug_weight = floor, margin, aug_weight

    def forward(self, w: torch.Tensor, logits: torch.Tensor, teacher_w: torch.Tensor, teacher_a: torch.Tensor,
                real: torch.Tensor) -> dict[str, torch.Tensor]:
        n = w.shape[0]
        w_error = torch.where(teacher_w > self.floor, w - teacher_w, torch.relu(w - self.floor)) * real
        parts = {"w": w_error.pow(2).sum() / n}
        if logits is None:  # a w-only student: no a(q) to fit
            parts["a"] = torch.zeros((), dtype=w.dtype)
        else:
            a_error = torch.where(teacher_a > 0, logits - teacher_a, torch.relu(logits + self.margin))
            parts["a"] = a_error.pow(2).sum() / n
        total = parts["w"] + self.aug_weight * parts["a"]
        return {"total": total, **{k: v.detach() for k, v in parts.items()}}
