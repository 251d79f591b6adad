"""Quality against query length and latency: train on SciFact over a range of λ, and the ablations.

    python research/sweep.py --lams 0.03 0.1 0.3 1.0          # sparsity sweep (PNG + table)
    python research/sweep.py --ablations                     # the paper's Table 2 rows + no-aug

Each point is ``train.py`` with ``PAPER``'s flags (the paper's setting, as reproductions.yaml pins it) then ``eval.py --method augmented`` (which also runs bm25-wp in the
same process, so latency ratios compare like with like). Runs go where
``bm25aug/reproduce/reproductions.yaml`` expects them (``runs/sweep/lam*``, ``runs/ablations/*``, the
default wp model ``runs/targets/<dataset>_wp``), metrics beside each as ``<run>.json``; a markdown
table on stdout and ``docs/sweep.png``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from bm25aug.train.arguments import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
# Output folders as bm25aug/reproduce/reproductions.yaml names them, so that its conditions reuse these runs.
# The recipe those runs pin: the paper's wp target and no weight floor, 6 epochs, none of the later
# training defaults (weight average, FLOPS, significance check).
PAPER = ["--target", "wp", "--weight-floor", "0", "--epochs", "6", "--ema-decay", "0", "--flops", "0",
         "--significance", "0"]
ABLATIONS = {"uniform_l1": ["--uniform-l1"], "no_w": ["--no-weights"], "bag_of_words": ["--bag-of-words"],
             "no_augmentation": ["--no-augmentation"]}


def run_point(ckpt: Path, flags: list[str], dataset: str) -> dict:
    """Train (the paper's setting: wp target, no weight floor, as reproductions.yaml's runs) into
    ``ckpt`` and evaluate; metrics cached beside it."""
    metrics = ckpt.with_suffix(".json")
    if not metrics.exists():
        train = [sys.executable, "train.py", "--dataset", dataset, *PAPER, "--output-dir", str(ckpt), *flags]
        if (ckpt / "last").exists():
            train.append("--resume")
        subprocess.run(train, cwd=ROOT, check=True)
        subprocess.run([sys.executable, "eval.py", "--dataset", dataset, "--method", "augmented", "--checkpoint",
                        str(ckpt), "--json-out", str(metrics)], cwd=ROOT, check=True)
    return json.loads(metrics.read_text())


def table(rows: dict[str, dict]) -> str:
    lines = ["| setting | nDCG@10 | R@100 | added terms / query | p50 ms | p50 / bm25-wp |", "|---|---|---|---|---|---|"]
    for name, m in rows.items():
        lines.append(f"| {name} | {m['ndcg@10']:.4f} | {m['recall@100']:.4f} | {m['aug_terms_mean']:.1f} | "
                     f"{m['latency_ms_p50']:.1f} | {m['latency_ms_p50'] / m['latency_ms_p50_bm25_wp']:.2f} |")
    some = next(iter(rows.values()))
    lines.append(f"| bm25-wp (same runs) | {some['ndcg@10_bm25_wp']:.4f} | | 0 | {some['latency_ms_p50_bm25_wp']:.1f} | 1.00 |")
    return "\n".join(lines)


def plot(rows: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(rows)
    ndcg = [rows[n]["ndcg@10"] for n in names]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, key, label in ((axes[0], "aug_terms_mean", "added terms per query (mean)"),
                           (axes[1], "latency_ms_p50", "p50 latency per query, model included (ms)")):
        xs = [rows[n][key] for n in names]
        ax.plot(xs, ndcg, "o-")
        for x, y, n in zip(xs, ndcg, names):
            ax.annotate(n, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        base = next(iter(rows.values()))
        ax.axhline(base["ndcg@10_bm25_wp"], color="gray", ls="--", label="bm25-wp")
        ax.axhline(base["ndcg@10_bm25_flat"], color="gray", ls=":", label="bm25-flat")
        ax.set_xlabel(label)
        ax.set_ylabel("SciFact test nDCG@10")
        ax.legend(fontsize=8)
    axes[1].axvline(base["latency_ms_p50_bm25_wp"], color="C3", ls="--", lw=0.8, label="bm25-wp p50")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="scifact")
    p.add_argument("--lams", type=float, nargs="*", default=[])
    p.add_argument("--ablations", action="store_true")
    p.add_argument("--plot", default="docs/sweep.png", help="where the sweep's PNG goes (docs/results.md shows it)")
    args = p.parse_args()
    default_wp = ROOT / "runs" / "targets" / f"{args.dataset}_wp"  # the wp target at default settings
    if args.lams:
        default = TrainConfig.for_dataset(args.dataset).lam
        rows = {f"λ={lam:g}": run_point(default_wp if lam == default else ROOT / "runs" / "sweep" / f"lam{lam:g}",
                                        ["--lam", str(lam)], args.dataset) for lam in args.lams}
        print("\nSparsity sweep\n" + table(rows))
        plot_path = ROOT / args.plot
        plot_path.parent.mkdir(parents=True, exist_ok=True)
        plot(rows, plot_path)
        print(f"plot: {plot_path}")
    if args.ablations:
        rows = {"full": run_point(default_wp, [], args.dataset)}
        rows.update({name: run_point(ROOT / "runs" / "ablations" / name, flags, args.dataset)
                     for name, flags in ABLATIONS.items()})
        print("\nAblations\n" + table(rows))


if __name__ == "__main__":
    main()
