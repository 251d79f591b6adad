"""What a hybrid index would buy, measured before building one: the original query on a flat
field (reweighted by w), the augmentation a(q) on a WordPiece field, summed.

    python research/hybrid_probe.py [--source scifact] [--transfer nfcorpus] [--out runs/hybrid_probe]

In a Lucene index with both fields, each field keeps the statistics (df, N, avgdl, norms) a
one-field index of it would have, so one BooleanQuery over the two scores a document exactly
``flat-BM25(w ⊙ bow(q)) + wp-BM25(a(q))`` over the dataset's existing flat and wp indexes. The
probe trains the default recipe (flat target, w floor 1) with that score, its L1 penalty on the wp
field's df, and evaluates by scoring every document in torch (the parity-tested TorchBM25; ties by
Lucene doc): on the source's seeded dev slice, and zero-shot on the transfer set's dev split, with
the augmentation gate (calibrated on the training queries, as train.py does) and without it.
Beside it, bm25-flat scored the same way. Test sets are never looked at. Compare with the levers
table (``research/levers.py``): same source dev slice (seed 13), same transfer split.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from bm25aug.data.registry import Split, load_dataset
from bm25aug.eval.metrics import evaluate_split
from bm25aug.lucene.index import ensure_index
from bm25aug.model.augmenter import AugmenterConfig, QueryAugmenter
from bm25aug.search.bm25 import Hit
from bm25aug.model.targets import make_target
from bm25aug.train.torch_bm25 import BM25Params, TorchBM25
from bm25aug.train.arguments import TrainConfig
from bm25aug.train.losses import AugmentationLoss, DfWeightedL1
from bm25aug.train.trainer import Trainer


class Fields:
    """A dataset's flat and wp indexes as the two fields of one hybrid index (rows aligned by docid)."""

    def __init__(self, flat: TorchBM25, dataset, tokenizer, params: BM25Params):
        """``flat``: the flat field's TorchBM25 (a trainer's, whose rows are read already)."""
        self.flat = flat
        self.wp = TorchBM25(ensure_index(dataset, "wp"), tokenizer.get_vocab(), params)

    def wp_rows(self, flat_rows: list[int]) -> list[int]:
        return self.wp.rows(self.flat.docids[np.asarray(flat_rows, np.int64)].tolist())

    def scores(self, flat_boosts: torch.Tensor, a: torch.Tensor, flat_rows: list[int]) -> torch.Tensor:
        """Queries x documents: the flat field's BM25 of the query terms + the wp field's of a(q)."""
        return self.flat.score(flat_boosts, flat_rows) + self.wp.score(a, self.wp_rows(flat_rows))


class HybridTrainer(Trainer):
    """The default trainer with the hybrid score and an exhaustive dev evaluation."""

    def __init__(self, config: TrainConfig, dataset, index: Path):
        super().__init__(config, dataset, index)
        flat = self.corpora[0].bm25
        self.fields = Fields(flat, dataset, self.model.tokenizer, flat.params)
        wp_target = make_target(self.model.tokenizer, AugmenterConfig(target="wp"))
        l1 = DfWeightedL1(wp_target.columns(self.fields.wp).vocab_df(self.fields.wp.df), self.fields.wp.num_docs,
                          config.uniform_l1, config.penalty_floor)
        self.corpora[0].loss = AugmentationLoss(l1, config.lam)

    def compute_loss(self, corpus, qb, w, a, rows, mask, relevant=None):
        flat_boosts = self.target.boosts(qb, w, torch.zeros_like(a), corpus.cmap)
        scores = self.fields.scores(flat_boosts, a, rows)
        return corpus.loss(a, scores, torch.arange(len(qb.terms), device=self.device), mask)

    @torch.no_grad()
    def evaluate_dev(self, baseline: bool = False) -> dict:
        source = self.corpora[0]
        got = evaluate(self.model, self.fields, self.target, source.cmap, source.dev, source.dataset, gated=False,
                       baseline=baseline)
        return {"dev_metric": got["ndcg@10"], "dev_metric_name": "ndcg@10", "dev_aug_terms": got["added_terms"]}


@torch.no_grad()
def evaluate(model: QueryAugmenter, fields: Fields, target, cmap, split: Split, dataset, gated: bool,
             baseline: bool = False, depth: int = 100) -> dict:
    """nDCG@10 of ``split`` with every document scored; ``gated``: a(q) only where the target's
    gate (the model's ``aug_gate``) keeps it, as search does; ``baseline``: plain BM25 on the flat field."""
    was_training = model.training
    model.eval()
    qids = sorted(q for q in split.queries if split.qrels.get(q))
    rows = list(range(fields.flat.num_docs))
    fields.flat.prefetch(rows)
    fields.wp.prefetch(fields.wp_rows(rows))
    # All queries in one batch: the documents' sparse matrices are built once, not per chunk.
    qb = target.batch([split.queries[q] for q in qids])
    out = model(torch.from_numpy(qb.input_ids), torch.from_numpy(qb.attention_mask))
    w, a = out.token_weights, out.augmentation
    if baseline:
        w, a = torch.ones_like(w), torch.zeros_like(a)
    elif gated:
        a = target.gated(qb, a)
    scores = fields.scores(target.boosts(qb, w, torch.zeros_like(a), cmap), a, rows).numpy()
    run = {}
    for qid, row in zip(qids, scores):
        top = np.lexsort((np.arange(len(row)), -row))[:depth]
        run[qid] = [Hit(str(fields.flat.docids[d]), float(row[d])) for d in top]
    model.train(was_training)
    metrics = evaluate_split(run, Split({q: split.queries[q] for q in qids}, split.qrels), dataset.corpus)
    return {"ndcg@10": metrics["ndcg@10"], "added_terms": float((a > 0).sum(dim=1).double().mean())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", default="scifact")
    p.add_argument("--transfer", default="nfcorpus")
    p.add_argument("--transfer-split", default="dev")
    p.add_argument("--out", default="runs/hybrid_probe")
    p.add_argument("--seed", type=int, default=13)
    args = p.parse_args()
    out = Path(args.out)
    source = load_dataset(args.source)
    # The recipe it was measured with (the 6-epoch default of its day: no weight average, FLOPS or
    # significance check, which would search the flat field alone).
    config = TrainConfig.for_dataset(args.source, output_dir=str(out / args.source), seed=args.seed, epochs=6,
                                     ema_decay=0.0, flops=0.0, significance=0.0)
    trainer = HybridTrainer(config, source, ensure_index(source, "flat"))
    history = trainer.train()["history"]
    best = QueryAugmenter.from_pretrained(out / args.source / "best")  # with its calibrated gate
    best_epoch = max(history[1:], key=lambda h: h["dev_metric"])
    transfer = load_dataset(args.transfer)
    params = trainer.corpora[0].bm25.params
    fields = Fields(TorchBM25(ensure_index(transfer, "flat"), None, params), transfer, best.tokenizer, params)
    cmap = best.target.columns(fields.flat)
    split = transfer.split(args.transfer_split)
    result = {"source": args.source, "seed": args.seed, "source_dev_bm25": history[0]["dev_metric"],
              "source_dev": best_epoch["dev_metric"], "source_dev_terms_ungated": best_epoch["dev_aug_terms"],
              "gate": best.config.aug_gate,
              "source_dev_gated": evaluate(best, trainer.fields, best.target, trainer.corpora[0].cmap, trainer.corpora[0].dev, source, gated=True),
              "transfer": args.transfer, "transfer_split": args.transfer_split,
              "transfer_bm25_flat": evaluate(best, fields, best.target, cmap, split, transfer, gated=False, baseline=True),
              "transfer_gated": evaluate(best, fields, best.target, cmap, split, transfer, gated=True),
              "transfer_ungated": evaluate(best, fields, best.target, cmap, split, transfer, gated=False)}
    (out / f"{args.source}_to_{args.transfer}.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
