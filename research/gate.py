"""How the augmentation gate's quantile trades in-domain gains for fewer guessed terms elsewhere,
chosen on dev sets only.

    python research/gate.py --checkpoint checkpoints/scifact [--quantiles 0.9 0.95 0.99 1.0]

The gate (``bm25aug.model.targets``) keeps a(q) only for queries where it has at most ``aug_gate``
non-zero entries that can reach an index term, ``aug_gate`` being a quantile of the training queries' counts
(``train.py``'s ``gate_quantile``, 0.95 by default). For each quantile this recomputes the gate
from the run's own training queries and reports: nDCG@10 (Acc@5 for QA sets), added terms and
added-term precision by weight (qrels sets) on the run's dev slice
(the one it was selected on) and on the other sets' non-test splits (``TRANSFER``: SciFact
train, NFCorpus dev, the first 1,000 SQuAD train questions). ``eval.py --aug-gate N`` applies a gate at search time.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bm25aug.data.registry import Dataset, Split, load_dataset
from bm25aug.errors import UserError
from bm25aug.eval.evaluate import METHODS, EvalConfig, run_method
from bm25aug.model.augmenter import QueryAugmenter
from bm25aug.train.callbacks import calibrate_gate

# Where the model is scored out of domain: (split, first N queries); never a test split.
TRANSFER = {"scifact": ("train", None), "nfcorpus": ("dev", None), "squad": ("train", 1000)}


def subset(split: Split, qids: list[str]) -> Split:
    return Split({q: split.queries[q] for q in qids}, {q: split.qrels.get(q, {}) for q in qids},
                 {q: split.answers[q] for q in qids if q in split.answers})


def dev_slice(run: Path) -> tuple[Dataset, Split, list[str]]:
    """The run's source dataset, its dev slice, and its training queries (from its config.json)."""
    config = json.loads((run / "config.json").read_text())
    dataset = load_dataset(config["dataset"])
    train, dev, _ = dataset.train_dev(config["dev_size"], config["seed"])
    return dataset, dev, list(train.queries.values())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default="checkpoints/scifact", help="a train.py output dir")
    p.add_argument("--quantiles", type=float, nargs="+", default=[0.9, 0.95, 0.99, 1.0])
    args = p.parse_args()
    try:
        sweep(Path(args.checkpoint), args.quantiles)
    except UserError as e:  # e.g. no such run, or no ../shared/data: one line, as the CLI prints it
        raise SystemExit(f"error: {e}") from None


def sweep(run: Path, quantiles: list[float]) -> None:
    """Print one table row per quantile (see the module docstring)."""
    if not (run / "config.json").exists():
        raise UserError(f"{run} is not a train.py output directory (no config.json); fix: pass one, "
                        f"e.g. checkpoints/scifact")
    model = QueryAugmenter.from_pretrained(run / "best")
    source, dev, train_queries = dev_slice(run)
    gates = {q: calibrate_gate(model, train_queries, q) for q in quantiles}
    sets = [(source, dev, f"{source.name} dev slice")]
    for name, (split_name, first) in TRANSFER.items():
        if name != source.name:
            dataset = load_dataset(name)
            split = dataset.split(split_name)
            sets.append((dataset, subset(split, list(split.queries)[:first]) if first else split,
                         f"{name} {split_name}" + (f"[:{first}]" if first else "")))
    metric = {d.name: "acc@5" if d.is_qa else "ndcg@10" for d, _, _ in sets}
    header = " | ".join(f"{where} {metric[d.name]} (added terms{'' if d.is_qa else ', precision'})"
                        for d, _, where in sets)
    print(f"| quantile | gate | {header} |\n|---|---|{'---|' * len(sets)}")
    for q, gate in gates.items():
        cells = []
        for dataset, split, _ in sets:
            config = EvalConfig(dataset=dataset.name, method="augmented", aug_gate=gate, companions=False)
            metrics, _ = run_method(METHODS["augmented"], config, dataset, split, 100 if dataset.is_qa else 1000,
                                    run / "best")
            precision = f", {metrics['added_precision_weight']:.2f}" if "added_precision_weight" in metrics else ""
            cells.append(f"{metrics[metric[dataset.name]]:.4f} ({metrics['aug_terms_mean']:.1f}{precision})")
        print(f"| {q} | {gate} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
