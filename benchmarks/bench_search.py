"""Search speed in one run: the Lucene floor, bm25-flat, bm25-wp, augmented, the encoder alone,
and bm25s as the speed peer, with every latency as a ratio to the floor.

    python benchmarks/bench_search.py --dataset scifact --checkpoint checkpoints/scifact [--json-out F]
        [--compare CHECKPOINT ...]

* floor: the wp query's Lucene query built from its term list, then ``IndexSearcher.search`` for
  k hits; the TopDocs stay in Java (no hit is read into Python).
* bm25-flat, bm25-wp, augmented: what ``search_arrays`` returns (Lucene doc numbers, Anserini's
  scores, external ids), query text in; augmented (on the index of the model's target) includes
  encoding the query.
* encode: the model alone, ONNX int8 (what search uses) and torch int8 (the previous default).
* ``--compare CHECKPOINT ...``: those models' augmented search and ONNX encode too, in the same
  run (e.g. ones trained with ``--encoder-layers 2`` or ``0``, against the default's torch int8 encode).
* p50 and p95 on one thread; QPS of one ``batch_search_arrays`` over all queries on 1 and 2
  threads (encoding included), each path's ratio to bm25-flat's paired round by round
  (``timing.paired_qps``: 9 rounds in which every path searches the batch in turn, after 2 s of
  warm-up each; the median QPS and the median per-round ratio).
* bm25s (``pip install -e '.[bench]'``) on every corpus, in a child process of its own: build
  seconds and peak RSS, its own tokenizer and index over the same texts, k hits, one query at a
  time (p50) and one ``retrieve`` over all queries on 1 and 2 threads (tokenizing included); our
  2-thread QPS over its best is printed. Skipped with a note when not installed (``--no-peer``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from bm25aug.data.registry import load_dataset
from bm25aug.errors import UserError
from bm25aug.eval.checkpoints import resolve_checkpoint
from bm25aug.model.loading import load_encoder
from bm25aug.model.packaged import is_packaged
from bm25aug.lucene.index import ensure_index
from bm25aug.io import write_json
from bm25aug.search.augmented import AugmentedSearcher
from bm25aug.search.bm25 import BM25Searcher
from timing import paired_qps


def interleaved_latencies(paths: dict[str, tuple], rounds: int = 2) -> dict[str, np.ndarray]:
    """Milliseconds per call for each path ``name: (fn, items)``, measured query by query in turn
    (query i on every path, then query i + 1), so that the machine's load hits every path alike.
    The first round is untimed, so that the JIT has compiled every path."""
    times: dict[str, list[float]] = {name: [] for name in paths}
    n = len(next(iter(paths.values()))[1])
    for r in range(rounds):
        for i in range(n):
            for name, (fn, items) in paths.items():
                start = time.perf_counter()
                fn(items[i])
                if r:
                    times[name].append(time.perf_counter() - start)
    return {name: np.asarray(t) * 1000 for name, t in times.items()}


def bm25s_peer(dataset_name: str, split: str | None, k: int) -> dict | None:
    """``benchmarks/bm25s_peer.py`` in a process of its own (so that its peak RSS is bm25s's, not
    ours); None, with a note, when bm25s is not installed or the peer fails."""
    import importlib.util
    import json
    import subprocess

    if importlib.util.find_spec("bm25s") is None:
        print("bm25s not installed (pip install -e '.[bench]'): no peer row")
        return None
    cmd = [sys.executable, str(Path(__file__).with_name("bm25s_peer.py")), dataset_name, "--k", str(k)]
    done = subprocess.run(cmd + (["--split", split] if split else []), capture_output=True, text=True)
    if done.returncode != 0:
        print(f"bm25s peer failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}; no peer row")
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def _runtime(encoder) -> str:
    """How a compared model encodes: the int8 ONNX graph, the static table's lookups, or the
    reweighter's static vectors and head."""
    side = getattr(encoder.config, "query_side", "contextual")
    return {"static": "static table", "reweighter": "static vectors"}.get(side, "onnx int8")


def run(dataset_name: str, checkpoint: Path, split: str | None, k: int, compare: list[Path] = (),
        with_peer: bool = True) -> dict:
    import torch

    torch.set_num_threads(1)
    dataset = load_dataset(dataset_name)
    queries = list(dataset.split(split or dataset.spec.eval_split).queries.values())
    wp = BM25Searcher(ensure_index(dataset, "wp"))
    flat = BM25Searcher(ensure_index(dataset, "flat"))
    model = load_encoder(checkpoint, "onnx-int8")
    augmented = AugmentedSearcher(model, flat if model.config.target == "flat" else wp)
    index = wp.index
    term_lists = [wp.query_terms(q) for q in queries]

    paths = {
        "floor": (lambda t: index.searcher.search(index.weighted_query(t), k), term_lists),
        "bm25-flat": (lambda q: flat.search_arrays(q, k), queries),
        "bm25-wp": (lambda q: wp.search_arrays(q, k), queries),
        "augmented": (lambda q: augmented.search_arrays(q, k), queries),
        "encode (onnx int8)": (lambda q: augmented.encoder.encode(q), queries),
    }
    if not is_packaged(checkpoint):  # a packaged model ships no torch weights
        torch_int8 = load_encoder(checkpoint, "torch-int8")
        paths["encode (torch int8)"] = (lambda q: torch_int8.encode(q), queries)
    batch = {name: s for name, s in (("bm25-flat", flat), ("bm25-wp", wp), ("augmented", augmented))}
    labels = {c: c.parent.name if c.name == "best" else c.name for c in compare}
    kinds = {}
    for other_path, label in labels.items():
        other = load_encoder(other_path, "onnx-int8")
        kinds[other_path] = _runtime(other)
        other_search = AugmentedSearcher(other, flat if other.config.target == "flat" else wp)
        paths[f"augmented ({label})"] = (lambda q, s=other_search: s.search_arrays(q, k), queries)
        paths[f"encode ({kinds[other_path]}, {label})"] = (lambda q, m=other: m.encode(q), queries)
        batch[f"augmented ({label})"] = other_search
    rows = interleaved_latencies(paths)
    rates, over_flat = paired_rates(batch, queries, k)
    peer = bm25s_peer(dataset_name, split, k) if with_peer else None

    floor = float(np.percentile(rows["floor"], 50))
    print(f"\n{dataset_name}: {len(dataset.corpus)} docs, {len(queries)} queries, k={k}, checkpoint {checkpoint}")
    print("| path | p50 ms | p95 ms | p50 / floor | QPS 1 thread | QPS 2 threads |\n|---|---|---|---|---|---|")
    for name, lat in rows.items():
        q1, q2 = rates.get((name, 1)), rates.get((name, 2))
        print(f"| {name} | {np.percentile(lat, 50):.2f} | {np.percentile(lat, 95):.2f} | "
              f"{np.percentile(lat, 50) / floor:.2f}x | {f'{q1:.0f}' if q1 else ''} | {f'{q2:.0f}' if q2 else ''} |")
    if peer:
        print(f"| bm25s (peer) | {peer['p50_ms']:.2f} | {peer['p95_ms']:.2f} | {peer['p50_ms'] / floor:.2f}x | "
              f"{peer['qps_1t']:.0f} | {peer['qps_2t']:.0f} |")
        best = max(peer["qps_1t"], peer["qps_2t"])
        print(f"bm25s: build {peer['build_s']:.1f} s, peak RSS {peer['peak_rss_mb']:,.0f} MB; QPS at 2 threads over "
              f"bm25s's best: bm25-flat {rates[('bm25-flat', 2)] / best:.2f}x, augmented "
              f"{rates[('augmented', 2)] / best:.2f}x")
    for name in ("bm25-flat", "augmented"):
        print(f"{name}: QPS 2 threads / 1 thread {rates[(name, 2)] / rates[(name, 1)]:.2f}x")
    p50 = {name: float(np.percentile(lat, 50)) for name, lat in rows.items()}
    paths = {name: {"p50_ms": p50[name], "p95_ms": float(np.percentile(lat, 95)),
                    **{f"qps_{t}t": rates[(name, t)] for t in (1, 2) if (name, t) in rates}}
             for name, lat in rows.items()}
    return {
        "paths": paths,
        "peer": peer,
        "dataset": dataset_name, "checkpoint": str(checkpoint), "encoder": _runtime(model), "num_docs": len(dataset.corpus), "num_queries": len(queries), "k": k,
        "floor_p50_ms": floor, "bm25_flat_p50_ms": p50["bm25-flat"], "bm25_wp_p50_ms": p50["bm25-wp"],
        "augmented_p50_ms": p50["augmented"], "encode_p50_ms": p50["encode (onnx int8)"],
        "encode_torch_int8_p50_ms": p50.get("encode (torch int8)"),
        **{f"{key}_p95_ms": float(np.percentile(rows[name], 95)) for key, name in
           (("floor", "floor"), ("bm25_flat", "bm25-flat"), ("bm25_wp", "bm25-wp"), ("augmented", "augmented"))},
        **{f"qps_{name.replace('-', '_')}_{t}t": rate for (name, t), rate in rates.items() if "(" not in name},
        **{f"{name.replace('-', '_')}_over_flat_{t}t": r for (name, t), r in over_flat.items() if "(" not in name},
        **({f"bm25s_{key}": peer[key] for key in ("qps_1t", "qps_2t", "build_s", "peak_rss_mb", "p50_ms")} if peer else {}),
        "compare": [{"checkpoint": c.name if is_packaged(c) else str(c), "augmented_p50_ms": p50[f"augmented ({label})"],
                     "encode_p50_ms": p50[f"encode ({kinds[c]}, {label})"], "encoder": kinds[c],
                     **{f"qps_augmented_{t}t": rates[(f"augmented ({label})", t)] for t in (1, 2)},
                     **{f"over_flat_{t}t": over_flat[(f"augmented ({label})", t)] for t in (1, 2)}}
                    for c, label in labels.items()],
    }


def paired_rates(batch: dict, queries: list[str], k: int) -> tuple[dict, dict]:
    """``{(path, threads): QPS}`` and ``{(path, threads): ratio to the first path}`` of each
    searcher's batch search on 1 and 2 threads, paired within each round (``timing.paired_qps``):
    every ratio is the median of per-round ratios, which a slow spell of the machine leaves alone."""
    paired = {t: paired_qps({name: (lambda q, n, s=s: s.batch_search_arrays(q, k, threads=n)) for name, s in batch.items()},
                            queries, t) for t in (1, 2)}
    return ({(name, t): paired[t][name]["qps"] for name in batch for t in (1, 2)},
            {(name, t): paired[t][name]["over_first"] for name in batch for t in (1, 2)})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", nargs="+", default=["scifact"])
    p.add_argument("--checkpoint", default="checkpoints/scifact", help="a train.py output dir or a model dir")
    p.add_argument("--split")
    p.add_argument("--k", type=int, default=1000)
    p.add_argument("--json-out", help="one JSON object per dataset, in a list")
    p.add_argument("--record", help="write the run where docs/speed.md's Speed table is generated from "
                                    "(docs/data/speed.json), with this command")
    p.add_argument("--no-peer", action="store_true", help="leave bm25s out (it builds its own index of each corpus)")
    p.add_argument("--compare", nargs="*", default=[],
                   help="other checkpoints whose augmented search and encoder join the same run")
    args = p.parse_args()
    load_before = os.getloadavg()[0]  # recorded: a ratio taken beside other work misleads
    try:
        checkpoint, *compare = (resolve_checkpoint(c, args.dataset[0], False) for c in [args.checkpoint, *args.compare])
        results = [run(name, checkpoint, args.split, args.k, compare, not args.no_peer) for name in args.dataset]
    except UserError as e:  # e.g. no such model, or no ../shared/data: one line, as the CLI prints it
        raise SystemExit(f"error: {e}") from None
    if args.json_out:
        write_json(args.json_out, results)
    if args.record:
        write_json(args.record, {"command": "python " + " ".join(sys.argv), "runs": results,
                                 "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]}})


if __name__ == "__main__":
    main()
