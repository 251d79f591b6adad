"""Does the label-free gate of ``bm25aug adapt`` agree with real judgements? An adapted run whose
gate served it as plain BM25 keeps its learned table or heads in best/ (only its ``use_weights``
and ``use_augmentation`` are switched off), so this evaluates best/ with both switched back on, on
a split that has real judgements: what the gate turned away.

    python research/adapt_gate.py --run runs/adapt/scifact --dataset scifact --split train [--json-out F]

It copies best/ into a temporary folder (the run is never written) and runs ``eval.py``'s
evaluation of the augmented method there; with the gate's verdict (``selection.json``) beside the
result, a "served as plain BM25" whose ungated score is at or above bm25-flat is a gate that
turned away a gain, and a "kept" below bm25-flat one that let a loss through (docs/adapt.md).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from bm25aug.eval.evaluate import EvalConfig, evaluate
from bm25aug.model.config import CONFIG_NAME


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True, help="an adapt --output-dir")
    p.add_argument("--dataset", required=True)
    p.add_argument("--split", required=True)
    p.add_argument("--json-out")
    args = p.parse_args()
    selection = json.loads((Path(args.run) / "selection.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "best"
        shutil.copytree(Path(args.run) / "best", model, ignore=shutil.ignore_patterns("onnx"))
        config = json.loads((model / CONFIG_NAME).read_text())
        config.update(use_weights=True, use_augmentation=True)
        (model / CONFIG_NAME).write_text(json.dumps(config, indent=2))
        result = evaluate(EvalConfig(dataset=args.dataset, method="augmented", split=args.split,
                                     checkpoint=str(model), companions=False))
    # the ungated model's metrics, beside the gate's verdict and p-value (kept: 1, plain BM25: 0)
    out = {**result.metrics["augmented"], "gate_kept": float(selection["kept"]), "gate_p": selection["p_value"]}
    main = "acc@5" if "acc@5" in out else "ndcg@10"
    print(f"{args.run} on {args.dataset}/{args.split}: gate {'kept' if selection['kept'] else 'plain BM25'} "
          f"(p = {selection['p_value']:.2g}); with its learned weights, {main} {out[main]:.4f}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
