"""Where a query's encoding time goes: the Python stages around ONNX Runtime, and the graph's
operators inside it.

    python research/profile_encoder.py --checkpoint checkpoints/scifact [--dataset scifact] [--top 12] [--json-out F]

Stages (p50 over the split's queries, one thread, each query encoded alone as search does; once
with each query read for the first time, its words' analysis not cached, then again from the cache):
``batch`` (WordPiece tokenization and, for the flat target, Lucene's analysis of the query),
``session.run`` (the int8 ONNX graph) and ``term_lists`` (w and a into boosted terms). Operators:
ONNX Runtime's own profile, summed per operator type, the a(q) head (``aug_head``) apart from the
rest of the graph (the encoder, mostly), in ms per query. Batches: ``session.run``'s ms per query
with 1, 8 and 32 queries a pass (dynamic int8 quantizes each pass's activations with one scale,
so search encodes one query a pass; this says what batching would buy).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from bm25aug.data.registry import load_dataset
from bm25aug.errors import UserError
from bm25aug.io import write_json
from bm25aug.eval.checkpoints import resolve_checkpoint
from bm25aug.model.onnx_encoder import onnx_session
from bm25aug.model.loading import load_encoder


def stage_times(encoder, queries: list[str]) -> dict[str, float]:
    """p50 ms of each stage of ``OnnxQueryEncoder.encode``, the first 20 queries untimed."""
    times: dict[str, list[float]] = {"batch": [], "session.run": [], "term_lists": []}
    for i, query in enumerate(queries):
        start = time.perf_counter()
        batch = encoder.target.batch([query])
        ran = time.perf_counter()
        w, a = encoder.outputs(batch)  # a is None for a graph cut to w (general, its students)
        listed = time.perf_counter()
        encoder.target.term_lists(batch, w, a)
        end = time.perf_counter()
        if i >= 20:
            for name, t in (("batch", ran - start), ("session.run", listed - ran), ("term_lists", end - listed)):
                times[name].append(t * 1000)
    return {name: float(np.percentile(t, 50)) for name, t in times.items()}


def first_time_one_call_per_word(encoder, queries: list[str]) -> dict[str, float]:
    """``stage_times`` of queries read for the first time (the analysis cache emptied) with one Java
    call for each word not seen before, as before issue 75: what analysing a query's new words
    in one call saved."""
    from bm25aug.lucene import analysis

    joint = analysis._analyze_chunks
    analysis._offset_chunks.clear()
    analysis._analyze_chunks = lambda chunks: {k: v for c in dict.fromkeys(chunks) for k, v in joint([c]).items()}
    try:
        return stage_times(encoder, queries)
    finally:
        analysis._analyze_chunks = joint


def operator_times(model_path: str, encoder, queries: list[str]) -> dict[str, float]:
    """ms per query per operator type (the a(q) head's MatMul and ``weight_head`` apart)."""
    session = onnx_session(Path(model_path), profile=True)
    for query in queries:
        batch = encoder.target.batch([query])
        session.run(None, {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask})
    trace = Path(session.end_profiling())
    total: dict[str, float] = defaultdict(float)
    for event in json.loads(trace.read_text()):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            # The a(q) head is the node whose output has one column per live entry (it is traced
            # from a function of the head's rows, so its name does not say aug_head).
            shapes = [dims for out in event["args"].get("output_type_shape", []) for dims in out.values()]
            head = any(dims[-1:] == [len(encoder.target.live)] for dims in shapes)
            part = "aug_head" if head and "MatMul" in event["args"]["op_name"] else \
                "weight_head" if "weight_head" in event["name"] else "rest"
            total[f"{event['args']['op_name']} ({part})"] += event["dur"] / 1000 / len(queries)
    trace.unlink()
    return dict(total)


def batch_times(encoder, queries: list[str], sizes: tuple[int, ...] = (1, 8, 32)) -> dict[int, float]:
    """ms per query of ``session.run`` with ``size`` queries a pass (the queries sorted by length,
    so a pass pads little), the best of 3 passes over all of them: whether batching pays."""
    queries = sorted(queries, key=len)
    out = {}
    for size in sizes:
        batches = [encoder.target.batch(queries[i:i + size]) for i in range(0, len(queries), size)]
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for b in batches:
                encoder.session.run(None, {"input_ids": b.input_ids, "attention_mask": b.attention_mask})
            best = min(best, time.perf_counter() - start)
        out[size] = best * 1000 / len(queries)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", default="checkpoints/scifact", help="a train.py output dir or a model dir")
    p.add_argument("--dataset", default="scifact")
    p.add_argument("--split")
    p.add_argument("--top", type=int, default=12, help="operators to list")
    p.add_argument("--json-out", help="write the stages (cold and warm), the batches and the operators here")
    args = p.parse_args()
    try:
        checkpoint = resolve_checkpoint(args.checkpoint, args.dataset, False)
        encoder = load_encoder(checkpoint, "onnx-int8")
        dataset = load_dataset(args.dataset)
    except UserError as e:  # one line, as the CLI prints it
        raise SystemExit(f"error: {e}") from None
    queries = list(dataset.split(args.split or dataset.spec.eval_split).queries.values())
    stages = stage_times(encoder, queries)  # each query read for the first time: the analysis cache is cold
    warm = stage_times(encoder, queries)  # the same queries again: every word's analysis from the cache
    per_word = first_time_one_call_per_word(encoder, queries)
    print(f"{checkpoint}: {len(queries)} {dataset.name} queries, p50 ms per stage")
    for label, times in (("first time", stages), ("again", warm), ("first time, one Java call a word", per_word)):
        print(f"{label}: " + " | ".join(f"{name} {ms:.3f}" for name, ms in times.items()))
    batched = batch_times(encoder, queries)
    print("session.run, ms per query with B queries a pass: " + " | ".join(f"B={b} {ms:.3f}" for b, ms in batched.items()))
    ops = operator_times(encoder.onnx_path, encoder, queries)
    print(f"\noperators, ms per query (ONNX Runtime profile; their sum {sum(ops.values()):.3f}):")
    for name, ms in sorted(ops.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"  {ms:.3f}  {name}")
    if args.json_out:
        write_json(args.json_out, {"command": "python " + " ".join(sys.argv), "checkpoint": str(checkpoint),
                                   "queries": len(queries), "stages_first_time": stages, "stages_again": warm,
                                   "stages_first_time_one_call_per_word": per_word,
                                   "batched": batched, "operators": ops})


if __name__ == "__main__":
    main()
