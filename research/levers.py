"""Which training levers make augmentation pay in domain and on transfer, chosen on dev sets only.

    python research/levers.py [--only NAME ...] [--source scifact --transfer nfcorpus]

Each lever is ``train.py`` flags. A point is trained on the source set (its dev metric is the best
epoch on the seeded dev slice of train, from ``log.jsonl``), then evaluated zero-shot on the
transfer set's dev split (``eval.py --transfer``), where plain BM25 flat and wp run in the same
process. Test sets are never looked at here. Results: ``runs/levers/<source>/*.json`` and a
markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def slug(name: str) -> str:
    """A lever's run folder name (under runs/levers/<source>/)."""
    return "".join(c if c.isalnum() else "_" for c in name).strip("_")


# Every lever names its target and weight floor (the defaults changed with these results). All run
# the 6 epochs they were measured with, without a weight average, FLOPS or significance check (BASE),
# unless the lever sets its own: the SciFact preset's 20 epochs came from the "20 epochs" levers,
# today's EMA 0.99 and FLOPS 0.1 defaults from the "EMA 0.99, FLOPS 0.1" levers.
BASE = ["--epochs", "6", "--ema-decay", "0", "--flops", "0", "--significance", "0"]
# The SciFact recipe the later levers change one thing of (the default until the "random negatives"
# levers, which SciFact's preset now adds), and where its lever run (seed 13) is: the teacher of the
# distilled levers.
RECIPE = ["--target", "flat", "--weight-floor", "1", "--epochs", "20", "--ema-decay", "0.99", "--flops", "0.1"]
RECIPE_RUN = f"runs/levers/scifact/{slug('flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1')}"
LEVERS: dict[str, list[str]] = {
    "wp (paper)": ["--target", "wp", "--weight-floor", "0"],
    "flat": ["--target", "flat", "--weight-floor", "0"],
    "flat, 4 hard negatives": ["--target", "flat", "--weight-floor", "0", "--hard-negatives", "4"],
    "flat, λ 0.03": ["--target", "flat", "--weight-floor", "0", "--lam", "0.03"],
    "flat, max-pooled a": ["--target", "flat", "--weight-floor", "0", "--pooling", "max"],
    "flat, w floor 1 (the default at 6 epochs)": ["--target", "flat", "--weight-floor", "1"],
    "flat, penalty floor 0.05": ["--target", "flat", "--weight-floor", "0", "--penalty-floor", "0.05"],
    "flat, w floor 1, penalty floor 0.15": ["--target", "flat", "--weight-floor", "1", "--penalty-floor", "0.15"],
    "flat, w floor 1, encoder lr 1e-4": ["--target", "flat", "--weight-floor", "1", "--lr", "1e-4"],
    "flat, w floor 1, a threshold 0.1": ["--target", "flat", "--weight-floor", "1", "--aug-threshold", "0.1"],
    "flat, w floor 1, a threshold 0.2": ["--target", "flat", "--weight-floor", "1", "--aug-threshold", "0.2"],
    "flat, w floor 1, 3 encoder layers": ["--target", "flat", "--weight-floor", "1", "--encoder-layers", "3"],
    "flat, w floor 1, 2 encoder layers": ["--target", "flat", "--weight-floor", "1", "--encoder-layers", "2"],
    "flat, w floor 1, 1 encoder layer": ["--target", "flat", "--weight-floor", "1", "--encoder-layers", "1"],
    "flat, w floor 1, 2 encoder layers, a threshold 0.1": ["--target", "flat", "--weight-floor", "1",
                                                           "--encoder-layers", "2", "--aug-threshold", "0.1"],
    "flat, w floor 1, 800 pseudo-queries": ["--target", "flat", "--weight-floor", "1", "--pseudo-queries", "800"],
    "flat, w floor 1, 4 hard negatives": ["--target", "flat", "--weight-floor", "1", "--hard-negatives", "4"],
    "flat, w floor 1, 20 epochs": ["--target", "flat", "--weight-floor", "1", "--epochs", "20"],
    "flat, w floor 1, 20 epochs, a threshold 0.1": ["--target", "flat", "--weight-floor", "1", "--epochs", "20",
                                                    "--aug-threshold", "0.1"],
    "flat, w floor 1, 20 epochs, off-positive penalty 1": ["--target", "flat", "--weight-floor", "1", "--epochs", "20",
                                                           "--off-positive-penalty", "1"],
    "flat, w floor 1, 20 epochs, off-positive penalty 0.1": ["--target", "flat", "--weight-floor", "1", "--epochs",
                                                             "20", "--off-positive-penalty", "0.1"],
    "flat, w floor 1, 20 epochs, 2 encoder layers": ["--target", "flat", "--weight-floor", "1", "--epochs", "20",
                                                     "--encoder-layers", "2"],
    "flat, w floor 1, 20 epochs, EMA 0.99": ["--target", "flat", "--weight-floor", "1", "--epochs", "20",
                                             "--ema-decay", "0.99"],
    "flat, w floor 1, 20 epochs, FLOPS 1": ["--target", "flat", "--weight-floor", "1", "--epochs", "20",
                                            "--flops", "1"],
    "flat, w floor 1, 20 epochs, FLOPS 0.1": ["--target", "flat", "--weight-floor", "1", "--epochs", "20",
                                              "--flops", "0.1"],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1": [*RECIPE],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.3": ["--target", "flat", "--weight-floor", "1", "--epochs", "20",
                                                        "--ema-decay", "0.99", "--flops", "0.3"],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1, encoder lr 5e-5": [*RECIPE, "--lr", "5e-5"],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1, no encoder layers": [*RECIPE, "--encoder-layers", "0"],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1, a(q) from the embeddings": [*RECIPE, "--aug-layer", "0"],
    # Distilled from the default recipe's run of the same seed (RECIPE_RUN; run that lever first).
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1, no encoder layers, distilled": [
        *RECIPE, "--encoder-layers", "0", "--teacher", RECIPE_RUN],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1, centered a(q) init": [*RECIPE, "--aug-init", "centered"],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1, 1024 random negatives": [*RECIPE, "--random-negatives", "1024"],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1, 1024 random negatives, no encoder layers": [
        *RECIPE, "--random-negatives", "1024", "--encoder-layers", "0"],
    # Seed 14 (its own dev slice, so compare these two with each other only).
    "flat, w floor 1 (the default at 6 epochs), seed 14": ["--target", "flat", "--weight-floor", "1", "--seed", "14"],
    "flat, w floor 1, 2 encoder layers, seed 14": ["--target", "flat", "--weight-floor", "1", "--encoder-layers", "2",
                                                   "--seed", "14"],
    "flat, w floor 1, 20 epochs, seed 14": ["--target", "flat", "--weight-floor", "1", "--epochs", "20", "--seed", "14"],
    "flat, w floor 1, 20 epochs, 2 encoder layers, seed 14": ["--target", "flat", "--weight-floor", "1", "--epochs",
                                                              "20", "--encoder-layers", "2", "--seed", "14"],
    "flat, w floor 1, 20 epochs, EMA 0.99, seed 14": ["--target", "flat", "--weight-floor", "1", "--epochs", "20",
                                                      "--ema-decay", "0.99", "--seed", "14"],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1, seed 14": [*RECIPE, "--seed", "14"],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.3, seed 14": ["--target", "flat", "--weight-floor", "1", "--epochs",
                                                                 "20", "--ema-decay", "0.99", "--flops", "0.3",
                                                                 "--seed", "14"],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1, encoder lr 5e-5, seed 14": [
        *RECIPE, "--lr", "5e-5", "--seed", "14"],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1, no encoder layers, seed 14": [
        *RECIPE, "--encoder-layers", "0", "--seed", "14"],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1, a(q) from the embeddings, seed 14": [
        *RECIPE, "--aug-layer", "0", "--seed", "14"],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1, no encoder layers, distilled, seed 14": [
        *RECIPE, "--encoder-layers", "0", "--teacher", f"{RECIPE_RUN}__seed_14", "--seed", "14"],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1, centered a(q) init, seed 14": [
        *RECIPE, "--aug-init", "centered", "--seed", "14"],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1, 1024 random negatives, seed 14": [
        *RECIPE, "--random-negatives", "1024", "--seed", "14"],
    "flat, w floor 1, 20 epochs, EMA 0.99, FLOPS 0.1, 1024 random negatives, no encoder layers, seed 14": [
        *RECIPE, "--random-negatives", "1024", "--encoder-layers", "0", "--seed", "14"],
}
TRANSFER_SPLIT = {"nfcorpus": "dev", "scifact": "train", "squad": "train"}  # never the test split


def run_point(name: str, flags: list[str], source: str, transfer: str, out: Path) -> dict:
    """Train (or reuse) one lever, then evaluate it on the transfer dev split with its
    augmentation gate and without it (``--aug-gate 0``)."""
    ckpt = out / slug(name)
    if not (ckpt / "best").exists() or not (ckpt / "log.jsonl").exists():
        train = [sys.executable, "train.py", "--dataset", source, "--output-dir", str(ckpt), *BASE, *flags, "--resume"]
        subprocess.run(train, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    got = {}
    for suffix, extra in (("", []), (".ungated", ["--aug-gate", "0"])):
        metrics = out / f"{slug(name)}.{transfer}{suffix}.json"
        if not metrics.exists():
            subprocess.run([sys.executable, "eval.py", "--transfer", transfer, "--split", TRANSFER_SPLIT[transfer],
                            "--method", "augmented", "--checkpoint", str(ckpt), "--no-companions", *extra,
                            "--json-out", str(metrics)], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        got[suffix] = json.loads(metrics.read_text())
    log = [json.loads(line) for line in (ckpt / "log.jsonl").read_text().splitlines()]
    best = max(log[1:], key=lambda h: h["dev_metric"])
    return {"source_dev": best["dev_metric"], "source_dev_bm25": log[0]["dev_metric"],
            "source_dev_terms": best["dev_aug_terms"], "source_dev_precision": source_dev_precision(ckpt, source),
            **got[""], "ungated": got[".ungated"]}


def source_dev_precision(ckpt: Path, source: str) -> float:
    """Added-term precision by weight of the trained model on its own dev queries (the seeded slice
    it was selected on, from ``dev_split.json``), cached beside the run."""
    cache = ckpt / "dev_precision.json"
    if not cache.exists():
        from bm25aug.data.registry import Split, load_dataset
        from bm25aug.eval.metrics import added_term_precision
        from bm25aug.lucene.index import ensure_index
        from bm25aug.io import write_json
        from bm25aug.model.augmenter import QueryAugmenter
        from bm25aug.search.augmented import AugmentedSearcher

        dataset = load_dataset(source)
        train = dataset.split("train")
        qids = json.loads((ckpt / "dev_split.json").read_text())["qids"]
        dev = Split({q: train.queries[q] for q in qids}, {q: train.qrels[q] for q in qids})
        target = QueryAugmenter.from_pretrained(ckpt / "best").config.target
        searcher = AugmentedSearcher.from_pretrained(ckpt / "best", ensure_index(dataset, target))
        term_lists = dict(zip(qids, [searcher.term_list(dev.queries[q]) for q in qids]))
        write_json(cache, added_term_precision(searcher.bm25, term_lists, dev))
    return json.loads(cache.read_text())["added_precision_weight"]


def baselines(transfer: str, out: Path) -> dict:
    """bm25-flat and bm25-wp on the transfer dev split, for the table's reference rows."""
    rows = {}
    for method in ("bm25-flat", "bm25-wp"):
        path = out / f"{method}.{transfer}.json"
        if not path.exists():
            subprocess.run([sys.executable, "eval.py", "--dataset", transfer, "--split", TRANSFER_SPLIT[transfer],
                            "--method", method, "--json-out", str(path)], cwd=ROOT, check=True,
                           stdout=subprocess.DEVNULL)
        rows[method] = json.loads(path.read_text())
    return rows


def table(rows: dict[str, dict], base: dict[str, dict], source: str, transfer: str) -> str:
    metric = "acc@5" if "acc@5" in next(iter(base.values())) else "ndcg@10"  # SciFact dev is nDCG@10
    split = f"{transfer} {TRANSFER_SPLIT[transfer]}"
    lines = [f"| lever | {source} dev metric (BM25 on it) | added terms ({source} dev) | {split} {metric} "
             f"(added terms) | same, without the gate | added precision by weight ({source} dev) | "
             f"added precision by weight ({split}) |",
             "|---|---|---|---|---|---|---|"]
    for name, m in rows.items():
        u = m["ungated"]
        lines.append(f"| {name} | {m['source_dev']:.4f} ({m['source_dev_bm25']:.4f}) | {m['source_dev_terms']:.1f} | "
                     f"{m[metric]:.4f} ({m['aug_terms_mean']:.1f}) | {u[metric]:.4f} ({u['aug_terms_mean']:.1f}) | "
                     f"{m['source_dev_precision']:.3f} | {m.get('added_precision_weight', float('nan')):.3f} |")
    for method, m in base.items():
        lines.append(f"| {method} | | | {m[metric]:.4f} (0) | | | |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--source", default="scifact")
    p.add_argument("--transfer", default="nfcorpus", choices=sorted(TRANSFER_SPLIT))
    p.add_argument("--only", nargs="*", help="lever names to run (default: all)")
    args = p.parse_args()
    out = ROOT / "runs" / "levers" / args.source
    out.mkdir(parents=True, exist_ok=True)
    names = args.only or list(LEVERS)
    unknown = [n for n in names if n not in LEVERS]
    if unknown:
        sys.exit(f"error: unknown lever(s) {unknown}; fix: use names from {list(LEVERS)}")
    rows = {n: run_point(n, LEVERS[n], args.source, args.transfer, out) for n in names}
    print(table(rows, baselines(args.transfer, out), args.source, args.transfer))


if __name__ == "__main__":
    main()
