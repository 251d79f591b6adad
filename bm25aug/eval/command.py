"""``bm25aug eval`` and ``eval.py``: a method on a dataset split (with its companions), or a run file scored."""

from __future__ import annotations

from pathlib import Path

from bm25aug.errors import UserError
from bm25aug.eval.evaluate import EvalConfig, evaluate, format_table, inputs, score_run
from bm25aug.io import write_json
from bm25aug.outputs import check_outputs
from bm25aug.search.trec import write_trec_run


def run(args) -> None:
    """``bm25aug eval`` / ``eval.py``: evaluate a method, or score a run file; print and write the metrics."""
    name = args.transfer or args.dataset
    if not name:
        raise UserError("no dataset; fix: pass --dataset NAME (or --transfer NAME)")
    method = args.method or ("augmented" if (args.checkpoint or args.transfer) else "bm25-wp")
    config = EvalConfig(dataset=name, method=method, split=args.split, checkpoint=args.checkpoint,
                        transfer=bool(args.transfer), k=args.k, k1=args.k1, b=args.b, runtime=args.runtime,
                        index_root=args.index_root, data_dir=args.data_dir, threads=args.threads,
                        index=args.index, tokenizer=args.tokenizer, remove_query=args.remove_query,
                        companions=args.companions, aug_gate=args.aug_gate, encode_batch_size=args.encode_batch_size,
                        fields=parse_fields(getattr(args, "fields", None)),
                        dense_model=getattr(args, "dense_model", None), fusion=getattr(args, "fusion", None),
                        fusion_weight=getattr(args, "fusion_weight", None),
                        fusion_depth=getattr(args, "fusion_depth", None))
    check_outputs({"--output": args.output, "--json-out": args.json_out}, inputs(config, args.run))
    if args.run:
        if args.output:
            raise UserError("--output writes the run of a search, and --run scores a run without searching; "
                            "fix: drop --output (--json-out writes the metrics)")
        metrics = score_run(config, args.run)
        print(format_table({Path(args.run).name: metrics}))
        if args.json_out:
            write_json(args.json_out, metrics)
        return
    result = evaluate(config)
    print(result.table())
    try:
        if args.output:
            write_trec_run(result.runs[method], args.output, tag=method)
    finally:  # the metrics are written even when the run file cannot be
        if args.json_out:
            write_json(args.json_out, result.summary())


def parse_fields(values: list[str] | None) -> dict[str, float] | None:
    """``--fields contents=1.0 title=0.25`` as ``{field: weight}`` (checked where it is searched)."""
    if not values:
        return None
    fields = {}
    for value in values:
        name, eq, weight = value.partition("=")
        try:
            fields[name] = float(weight) if eq else float("nan")
        except ValueError:
            fields[name] = float("nan")
        if not eq or fields[name] != fields[name]:
            raise UserError(f"--fields {value!r} is not FIELD=WEIGHT; fix: pass e.g. --fields contents=1.0 title=0.25")
    return fields
