"""Issue 51, item 3: the average of several training runs' weights (a "model soup").

Runs of one recipe that differ only in their seed start from the same pretrained encoder, so their
weights can be averaged parameter by parameter into one model of the same size and speed. This
writes that average as a model folder, which ``eval.py --checkpoint`` reads as any other:

    python research/soup.py --recipe general-open --seeds 13 7 --output-dir runs/soup/general-open

trains ``OUTPUT/seed<S>`` for each seed whose best/ is missing (``train.py --recipe R --seed S
--resume``) and writes their average to ``OUTPUT/best``; ``--runs DIR ...`` averages given runs instead.
Each run's best/ is read; every floating-point tensor of their state dicts is averaged (integer
buffers must be equal, and are kept). The runs must share a config except for the seed; the
folder's config and tokenizer are the first run's. A ``soup.json`` beside it names the runs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from bm25aug.errors import UserError
from bm25aug.model.loading import load_model

# The settings two runs of a soup may differ in; and added_budget, a static query side's setting that
# a contextual model never reads (a config saved before it existed reads 0, a newer one 6).
IGNORED = {"seed"}


def soup(runs: list[Path], output: Path) -> Path:
    models = [load_model(run / "best") for run in runs]
    ignored = IGNORED | ({"added_budget"} if models[0].config.query_side != "static" else set())
    configs = [{k: v for k, v in asdict(m.config).items() if k not in ignored} for m in models]
    if any(c != configs[0] for c in configs[1:]):
        differ = sorted(k for k in configs[0] if any(c.get(k) != configs[0][k] for c in configs[1:]))
        raise UserError(f"the runs' models differ in {', '.join(differ)}; fix: average runs of one recipe")
    states = [m.state_dict() for m in models]
    averaged = {}
    for name, first in states[0].items():
        if first.is_floating_point():
            averaged[name] = torch.stack([s[name].float() for s in states]).mean(dim=0).to(first.dtype)
        elif any(not torch.equal(s[name], first) for s in states[1:]):
            raise UserError(f"the runs' {name} differ and cannot be averaged; fix: average runs of one recipe")
        else:
            averaged[name] = first
    model = models[0]
    model.load_state_dict(averaged)
    model.save_pretrained(output / "best")
    (output / "soup.json").write_text(json.dumps({"runs": [str(r) for r in runs]}, indent=2))
    return output / "best"


def seed_runs(recipe: str, seeds: list[int], output: Path) -> list[Path]:
    """``output/seed<S>`` for each seed, trained by the recipe where its best/ is missing."""
    root = Path(__file__).resolve().parents[1]
    runs = [output / f"seed{seed}" for seed in seeds]
    for seed, run in zip(seeds, runs):
        if not (run / "best" / "bm25aug_config.json").exists():
            subprocess.run([sys.executable, str(root / "train.py"), "--recipe", recipe, "--seed", str(seed),
                            "--output-dir", str(run), "--resume"], check=True, cwd=root)
    return runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--runs", nargs="+", type=Path, help="train.py output dirs (each with best/)")
    source.add_argument("--recipe", help="train this recipe once per --seeds seed (where not trained yet)")
    p.add_argument("--seeds", nargs="+", type=int, default=[13, 7])
    p.add_argument("--output-dir", required=True, type=Path)
    args = p.parse_args()
    try:
        runs = args.runs or seed_runs(args.recipe, args.seeds, args.output_dir)
        print(soup(runs, args.output_dir))
    except UserError as e:
        raise SystemExit(f"error: {e}") from None
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"error: training failed (exit {e.returncode}, its error above); fix: resolve it, then "
                         f"run this again (--resume goes on)") from None


if __name__ == "__main__":
    main()
