"""The tables of README.md and docs/, generated from recorded data, never written by hand.

* ``<!-- reproductions:NAME -->`` blocks: the conditions of ``reproductions.yaml`` whose ``table``
  names NAME, with their expected values and commands.
* ``<!-- bench:speed -->``, ``<!-- bench:throughput -->``, ``<!-- bench:scale -->``,
  ``<!-- bench:extrapolation -->``, ``<!-- bench:serve -->`` and ``<!-- bench:two-core* -->`` blocks:
  the recorded runs of ``benchmarks/bench_search.py``, ``benchmarks/scale.py``,
  ``benchmarks/bench_serve.py``, ``benchmarks/two_core.py`` and ``benchmarks/bench_cluster.py``
  (``--record docs/data/*.json``).

``python -m bm25aug.reproduce --write-readme`` rewrites every block; ``tests/test_reproduce.py``
fails while a file disagrees with its data.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np

from bm25aug.io import atomic_write_text
from bm25aug.reproduce.choice_table import choice_table
from bm25aug.reproduce.cluster_tables import corpus_name, analyzer_table, cluster_table, ingest_table, sizing_table
from bm25aug.reproduce.hybrid_tables import cost_table, fusion_table, hnsw_table, precision_table
from bm25aug.reproduce.student_tables import fidelity_table

ROOT = Path(__file__).resolve().parents[2]
BENCH_DATA = {"speed": ROOT / "docs" / "data" / "speed.json", "scale": ROOT / "docs" / "data" / "scale.json",
              "serve": ROOT / "docs" / "data" / "serve.json"}
BENCH_DATA["throughput"] = BENCH_DATA["speed"]  # the same runs, as ratios
BENCH_DATA["extrapolation"] = BENCH_DATA["scale"]  # the same sizes, read at NQ's
# An earlier run with two cheaper encoders beside the default (--compare): its latencies only
BENCH_DATA["encoders"] = ROOT / "docs" / "data" / "speed_encoders.json"
BENCH_DATA["two-core"] = ROOT / "docs" / "data" / "two_core.json"
# The same benchmark with the model without encoder layers, encoding 64 queries a pass
BENCH_DATA["two-core-nolayer"] = ROOT / "docs" / "data" / "two_core_nolayer.json"
# The static query side beside the default and bm25-flat (bench_search.py --compare, --record)
BENCH_DATA["static"] = ROOT / "docs" / "data" / "speed_static.json"
# Two checkouts searching the same term lists, alternately (benchmarks/ab_term_lists.py --json-out)
BENCH_DATA["term-lists"] = ROOT / "docs" / "data" / "ab_term_lists.json"
# The same benchmark across issue 59's seams (the Index protocol, open_index, the floor modules)
BENCH_DATA["seams"] = ROOT / "docs" / "data" / "ab_seams.json"
# In-process Lucene against an OpenSearch cluster of 1 and 2 shards (benchmarks/bench_cluster.py --record)
BENCH_DATA["cluster"] = ROOT / "docs" / "data" / "bench_cluster.json"
BENCH_DATA["cluster-ingest"] = BENCH_DATA["cluster-sizing"] = BENCH_DATA["cluster"]
# The packaged general model, its reweighter and the static in-domain model beside bm25-flat (bench_search.py)
BENCH_DATA["general-models"] = ROOT / "docs" / "data" / "speed_general.json"
# The static query side's added-term budget, quality against QPS (benchmarks/bench_budget.py --record)
BENCH_DATA["budget"] = ROOT / "docs" / "data" / "budget.json"
# A label-free choice between the general model alone and with RM3, per corpus (research/feedback_choice.py)
BENCH_DATA["feedback-choice"] = ROOT / "docs" / "data" / "feedback_choice.json"
# Where a training step's time goes (research/profile_training.py --json-out)
BENCH_DATA["profile"] = ROOT / "docs" / "data" / "profile_training.json"
# Hybrid search: the fusion chosen on dev (research/hybrid_defaults.py), its cost (benchmarks/bench_hybrid.py)
BENCH_DATA["hybrid-fusion"] = ROOT / "docs" / "data" / "hybrid_defaults.json"
BENCH_DATA["hybrid-cost"] = ROOT / "docs" / "data" / "hybrid_cost.json"
# bge-small-en-v1.5's fp32 and int8 exports side by side (benchmarks/bench_dense_precision.py)
BENCH_DATA["dense-precision"] = ROOT / "docs" / "data" / "dense_precision.json"
# ... and the default, which splits them (the corpus by int8, queries by fp32), beside int8 alone
BENCH_DATA["dense-split"] = ROOT / "docs" / "data" / "dense_split.json"
# The dense peer's HNSW index against exact search (benchmarks/bench_hnsw.py --json-out)
BENCH_DATA["hnsw"] = ROOT / "docs" / "data" / "hnsw.json"
# OpenSearch's built-in english analyzer against the flat index's (benchmarks/english_analyzer.py --record)
BENCH_DATA["english-analyzer"] = ROOT / "docs" / "data" / "english_analyzer.json"
# Students' agreement with their teacher on unlabelled queries (research/student_fidelity.py --json-out)
BENCH_DATA["student-fidelity"] = ROOT / "docs" / "data" / "student_fidelity.json"
METRIC_NAMES = {"ndcg@10": "nDCG@10", "recall@100": "R@100", "mrr@10": "MRR@10", "acc@5": "Acc@5",
                "acc@20": "Acc@20", "acc@100": "Acc@100", "aug_terms_mean": "added terms / query",
                "added_precision_weight": "added precision (weight)", "latency_ms_p50": "p50 ms",
                "corpus_encode_s": "corpus encoding s"}
_BLOCK = re.compile(r"<!-- (?P<kind>reproductions|bench):(?P<table>[\w-]+) -->\n(?:.*?\n)??<!-- /(?P=kind) -->", re.S)


def doc_files() -> list[Path]:
    """Every file that may hold generated blocks."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def reproductions_table(table: str, conditions: list) -> str:
    """The table of one ``table`` name, from the expected values."""
    members = [c for c in conditions if table in c.tables]
    present = {m for c in members for m in [*c.expected, *(c.reported or {})]}
    metrics = [m for m in METRIC_NAMES if m in present] + sorted(present - METRIC_NAMES.keys())
    lines = ["| condition | " + " | ".join(METRIC_NAMES.get(m, m) for m in metrics) + " | command |",
             "|---|" + "---|" * len(metrics) + "---|"]
    for c in members:
        cells = [_cell(c, m) for m in metrics]
        lines.append(f"| {c.row} | " + " | ".join(cells) + f" | `{c.command}` |")
    seeded = [c for c in members if c.seeds and c.tables[0] == table]  # the spread is quoted once
    for c in seeded:
        s = c.seeds["ndcg@10"]
        lines.append("")
        note = f" ({c.seeds['note']})" if "note" in c.seeds else ""
        extra = "".join(f" {METRIC_NAMES.get(m, m).capitalize()}: runs {', '.join(f'{x:g}' for x in v['runs'])}."
                        for m, v in c.seeds.items() if m not in ("seeds", "note", "ndcg@10"))
        lines.append(f"{c.row}: over {len(s['runs'])} seeds ({', '.join(str(x) for x in c.seeds['seeds'])}){note}, "
                     f"nDCG@10 {s['mean']:.4f} ± {s['std']:.4f} (mean ± std; runs "
                     f"{', '.join(f'{x:.4f}' for x in s['runs'])}). A single-seed difference smaller than "
                     f"that spread is noise.{extra}")
    return "\n".join(lines)


def _cell(condition, metric: str) -> str:
    values = {**(condition.reported or {}), **condition.expected}
    if metric not in values:
        return ""
    value = values[metric]
    if metric == "corpus_encode_s":
        return f"{value:,.0f}"
    if metric.endswith("_p") and 0 < value < 1e-4:  # a p-value far below any level: its order of magnitude
        return f"{value:.0e}"
    return f"{value:.1f}" if metric in ("aug_terms_mean", "latency_ms_p50") else f"{value:.4f}"


def speed_table(recorded: dict, qps: bool = True) -> str:
    """Paths as rows, each run (corpus) as five columns: p50, p95, p50 over the floor, QPS on 1
    and 2 threads (``qps=False``: the first three, and no peer row)."""
    runs = recorded["runs"]
    width = 5 if qps else 3
    head = ["path"]
    for run in runs:
        head += [f"{corpus_name(run)} p50 ms", "p95 ms", "p50 / floor", "QPS 1 thread", "QPS 2 threads"][:width]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for path in runs[0]["paths"]:
        cells = [path]
        for run in runs:
            got, floor = run["paths"].get(path), run["paths"]["floor"]["p50_ms"]
            cells += [""] * width if got is None else [
                f"{got['p50_ms']:.2f}", f"{got['p95_ms']:.2f}", f"{got['p50_ms'] / floor:.2f}x",
                f"{got['qps_1t']:,.0f}" if "qps_1t" in got else "", f"{got['qps_2t']:,.0f}" if "qps_2t" in got else ""][:width]
        lines.append("| " + " | ".join(cells) + " |")
    if qps and any(run.get("peer") for run in runs):
        cells = ["bm25s (peer)"]
        for run in runs:
            peer, floor = run.get("peer"), run["paths"]["floor"]["p50_ms"]
            if not peer:
                cells += ["", "", "", "", ""]
            elif "qps_1t" in peer:
                cells += [f"{peer['p50_ms']:.2f}", f"{peer['p95_ms']:.2f}", f"{peer['p50_ms'] / floor:.2f}x",
                          f"{peer['qps_1t']:,.0f}", f"{peer['qps_2t']:,.0f}"]
            else:  # a run recorded before bm25s was measured on two threads
                cells += [f"{peer['p50_ms']:.2f}", f"{peer['p95_ms']:.2f}", f"{peer['p50_ms'] / floor:.2f}x",
                          f"{peer['qps_batch']:,.0f} (one batch)", ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def throughput_table(recorded: dict) -> str:
    """Per corpus: QPS at 2 threads over 1 thread, and over bm25s's best QPS in the same run."""
    lines = ["| corpus | bm25-flat 2 / 1 threads | augmented 2 / 1 threads | bm25-flat / bm25s | augmented / bm25s "
             "| augmented / bm25-flat | bm25s build s | bm25s peak RSS MB |", "|" + "---|" * 8]
    for run in recorded["runs"]:
        flat, aug, peer = run["paths"]["bm25-flat"], run["paths"]["augmented"], run.get("peer") or {}
        best = max(peer.get("qps_1t", 0), peer.get("qps_2t", 0))
        lines.append(f"| {corpus_name(run)} | {flat['qps_2t'] / flat['qps_1t']:.2f}x | {aug['qps_2t'] / aug['qps_1t']:.2f}x | "
                     + (f"{flat['qps_2t'] / best:.2f}x | {aug['qps_2t'] / best:.2f}x | " if best else " | | ")
                     + f"{aug['qps_2t'] / flat['qps_2t']:.2f}x | "
                     + (f"{peer['build_s']:.0f} | {peer['peak_rss_mb']:,.0f} |" if "build_s" in peer else " | |"))
    return "\n".join(lines)


def scale_table(rows: list[dict]) -> str:
    """One row per corpus size: build, training and search costs, and quality. Beside the build's
    peak RSS, the peaks of its anonymous memory (the JVM heap, Python) and of its file-backed
    memory (index segments the merge maps, which the kernel drops under pressure), each its own
    peak over both builds, so the two need not sum to the peak RSS."""
    lines = ["| passages | build flat s (docs/s) | build wp s (docs/s) | wp / flat | build peak RSS MB | "
             "build peak anonymous MB | build peak file-backed MB | "
             "train setup s | train peak RSS MB | rows read | s / step | p50 ms flat | p50 ms wp | p50 ms augmented | "
             "augmented / wp | nDCG@10 flat | nDCG@10 augmented |", "|" + "---|" * 17]
    for r in rows:
        lines.append(
            f"| {r['size']:,} | {r['build_s_flat']:.1f} ({r['docs_per_s_flat']:,.0f}) | {r['build_s_wp']:.1f} "
            f"({r['docs_per_s_wp']:,.0f}) | {r['build_s_wp'] / r['build_s_flat']:.2f}x | {r['build_peak_rss_mb']:,.0f} | "
            f"{r['build_peak_anon_mb']:,.0f} | {r['build_peak_file_mb']:,.0f} | "
            f"{r['train_setup_s']:.1f} | {r['train_peak_rss_mb']:,.0f} | {r['train_rows_read']:,} | {r['step_s']:.2f} | "
            f"{r['p50_ms_bm25_flat']:.2f} | {r['p50_ms_bm25_wp']:.2f} | {r['p50_ms_augmented']:.2f} | "
            f"{r['p50_ms_augmented'] / r['p50_ms_bm25_wp']:.2f}x | {r['ndcg@10_bm25_flat']:.4f} | "
            f"{r['ndcg@10_augmented']:.4f} |")
    return "\n".join(lines)


NQ_PASSAGES = 21_015_324
# What the NQ line extrapolates: (key, label, unit divisor, unit).
_EXTRAPOLATED = (("build_s_flat", "flat build", 3600, "h"), ("build_s_wp", "wp build", 3600, "h"),
                 ("build_peak_anon_mb", "build anonymous peak", 1024, "GB"),
                 ("build_peak_rss_mb", "build peak RSS (mapped segments included)", 1024, "GB"),
                 ("train_setup_s", "training setup", 60, "min"), ("train_peak_rss_mb", "training peak RSS", 1024, "GB"),
                 ("p50_ms_bm25_wp", "bm25-wp p50", 1, "ms"), ("p50_ms_augmented", "augmented p50", 1, "ms"))


def extrapolate(rows: list[dict], target: int = NQ_PASSAGES) -> str:
    """A least-squares line in the corpus size through every size measured (three or more), read at
    ``target``; a value whose line falls below zero there is not extrapolated (noise, not a cost)."""
    if len(rows) < 3:
        return f"({len(rows)} size(s) measured: a line needs three or more, so no extrapolation)"
    sizes = np.array([r["size"] for r in rows], float)
    parts = []
    for key, label, divisor, unit in _EXTRAPOLATED:
        if all(key in r for r in rows):
            slope, intercept = np.polyfit(sizes, [r[key] for r in rows], 1)
            value = slope * target + intercept
            parts.append(f"{label} {value / divisor:.1f} {unit}" if value >= 0 else f"{label} not extrapolated "
                         f"(its line falls below 0)")
    return (f"Extrapolated to NQ's {target:,} passages by a line through {', '.join(f'{int(s):,}' for s in sizes)} "
            f"(training setup: for SciFact's training queries): " + ", ".join(parts) + ".")


def serve_table(recorded: dict) -> str:
    """One row per method and concurrency of ``benchmarks/bench_serve.py``, beside the same
    searches in process (batch QPS, one-query p50) from the same run."""
    lines = ["| corpus | method | concurrency | requests | errors | QPS | p50 ms | p99 ms | in process: batch QPS "
             "| in process: p50 ms | server / batch QPS | server p50 - in process |", "|" + "---|" * 12]
    for run in recorded["runs"]:
        top, low = max(r["concurrency"] for r in run["server"]), min(r["concurrency"] for r in run["server"])
        for r in run["server"]:
            local = run["in_process"][r["method"]]
            ratio = f"{r['qps'] / local['batch_qps']:.2f}x" if r["concurrency"] == top else ""
            extra = f"{r['p50_ms'] - local['p50_ms']:+.2f} ms" if r["concurrency"] == low else ""
            lines.append(f"| {corpus_name(run)} | {r['method']} | {r['concurrency']} | {r['requests']:,} | {r['errors']} | "
                         f"{r['qps']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {local['batch_qps']:,.0f} | "
                         f"{local['p50_ms']:.2f} | {ratio} | {extra} |")
    return "\n".join(lines)


def two_core_table(recorded: dict) -> str:
    """``benchmarks/two_core.py``'s run: each path's CPU a query in Python (P) and Java (J), its
    QPS, two estimates of what two threads can gain over one (steady state, and the CPU ceiling
    from the measured one-thread time), and what the SciFact goals for augmented (QPS at least
    0.5x bm25-flat's; two over one at least 1.7x) need of P and J."""
    paths = recorded["paths"]
    lines = ["| path | P: Python ms a query | J: Java ms a query | QPS 1 thread | QPS 2 threads | 2 / 1 threads "
             "| 1 thread's ms a query / max(P, J) | steady-state estimate 2 max(P, J) / (P + J) "
             "| CPU ceiling 2 x 1 thread's ms / (P + J) |", "|" + "---|" * 9]
    for name, r in paths.items():
        p, j, one, two = r["python_ms"], r["java_ms"], r["qps_1t"], r["qps_2t"]
        lines.append(f"| {name} | {p:.3f} | {j:.3f} | {one:,.0f} | {two:,.0f} | {two / one:.2f}x | "
                     f"{1000 / one / max(p, j):.2f} | {2 * max(p, j) / (p + j):.2f}x | {2000 / one / (p + j):.2f}x |")
    flat, aug, pre = paths["bm25-flat"], paths["augmented"], paths["augmented, pre-encoded"]
    ceiling = 2000 / (aug["python_ms"] + aug["java_ms"])  # QPS two cores allow augmented
    budget = 4000 / flat["qps_2t"]  # ms of CPU a query that two cores allow at half bm25-flat's QPS
    search = pre["python_ms"] + pre["java_ms"]  # an augmented query less its encoding
    encoding = aug["python_ms"] - pre["python_ms"]
    smaller = 0.3 / 1.7
    lines += ["", f"* Two cores allow augmented at most 2,000 / (P + J) = {ceiling:,.0f} QPS, "
              f"{ceiling / flat['qps_2t']:.2f}x bm25-flat's {flat['qps_2t']:,.0f} (measured: {aug['qps_2t']:,.0f}, "
              f"{aug['qps_2t'] / flat['qps_2t']:.2f}x). With its term lists encoded beforehand it answers "
              f"{pre['qps_2t'] / flat['qps_2t']:.2f}x bm25-flat's QPS.",
              f"* 0.5x bm25-flat's QPS needs an augmented query's P + J at most {budget:.3f} ms. Searching and "
              f"ranking its term lists take {search:.3f} of it (pre-encoded), which leaves the encoding "
              f"{budget - search:.3f} ms a query; it takes {encoding:.3f} ({encoding / (budget - search):.1f}x).",
              f"* In steady state, 1.7x two over one needs the smaller of P and J at most {smaller:.3f} of the "
              f"larger. With 0.5x as well: either J <= {budget / (1 + 1 / smaller):.3f} ms with the encoding the "
              f"larger part (augmented's J is {aug['java_ms']:.3f}, bm25-flat's {flat['java_ms']:.3f}), or "
              f"P <= {smaller * aug['java_ms']:.3f} ms with it the smaller (ranking the hits alone takes "
              f"{pre['python_ms']:.3f})."]
    return "\n".join(lines)


def static_table(recorded: dict) -> str:
    """The static query side against bm25-flat and the default model, from one bench_search.py run."""
    run = recorded["runs"][0]
    static = next(c for c in run["compare"] if c.get("encoder") == "static table")
    rows = [("bm25-flat", run["bm25_flat_p50_ms"], None, run["qps_bm25_flat_1t"], run["qps_bm25_flat_2t"]),
            ("augmented, default (contextual) model", run["augmented_p50_ms"], run["encode_p50_ms"],
             run["qps_augmented_1t"], run["qps_augmented_2t"]),
            ("augmented, static query side", static["augmented_p50_ms"], static["encode_p50_ms"],
             static["qps_augmented_1t"], static["qps_augmented_2t"])]
    flat1, flat2 = run["qps_bm25_flat_1t"], run["qps_bm25_flat_2t"]
    lines = ["| path | p50 ms | encode p50 ms | QPS 1 thread | QPS 2 threads | / bm25-flat, 1 thread "
             "| / bm25-flat, 2 threads |", "|" + "---|" * 7]
    for name, p50, encode, q1, q2 in rows:
        lines.append(f"| {name} | {p50:.2f} | {'' if encode is None else f'{encode:.3f}'} | {q1:,.0f} | {q2:,.0f} | "
                     f"{q1 / flat1:.2f}x | {q2 / flat2:.2f}x |")
    lines += ["", f"{run['dataset']}, {run['num_queries']} queries, k={run['k']}; recorded with `{recorded['command']}`."]
    return "\n".join(lines)


def models_table(recorded: dict) -> str:
    """bm25-flat, the run's model and every ``--compare`` model, from one bench_search.py run, each
    with its encoder and its QPS over bm25-flat's."""
    run = recorded["runs"][0]
    flat1, flat2 = run["qps_bm25_flat_1t"], run["qps_bm25_flat_2t"]

    def over(row: dict, prefix: str) -> tuple[float, ...]:  # the paired ratios where the run has them
        return tuple(row.get(f"{prefix}over_flat_{t}t", row[f"qps_augmented_{t}t"] / flat)
                     for t, flat in ((1, flat1), (2, flat2)))

    rows = [("bm25-flat", "", run["bm25_flat_p50_ms"], None, flat1, flat2, (1.0, 1.0)),
            (f"augmented, {Path(run.get('checkpoint', 'model')).name}", run.get("encoder", "onnx int8"),
             run["augmented_p50_ms"], run["encode_p50_ms"], run["qps_augmented_1t"], run["qps_augmented_2t"],
             over(run, "augmented_"))]
    rows += [(f"augmented, {c['checkpoint']}", c["encoder"], c["augmented_p50_ms"], c["encode_p50_ms"],
              c["qps_augmented_1t"], c["qps_augmented_2t"], over(c, "")) for c in run["compare"]]
    lines = ["| path | query side | p50 ms | encode p50 ms | QPS 1 thread | QPS 2 threads | / bm25-flat, 1 thread "
             "| / bm25-flat, 2 threads |", "|" + "---|" * 8]
    for name, side, p50, encode, q1, q2, (r1, r2) in rows:
        lines.append(f"| {name} | {side} | {p50:.2f} | {'' if encode is None else f'{encode:.3f}'} | {q1:,.0f} | "
                     f"{q2:,.0f} | {r1:.2f}x | {r2:.2f}x |")
    how = ("; each ratio is the median of per-round ratios (every path's batch in turn, 9 rounds), so it "
           "need not equal the quotient of the median QPS" if "augmented_over_flat_1t" in run else "")
    load = recorded.get("load_average_1min")
    quiet = f"; load average {load['before']:.1f} before the run and {load['after']:.1f} after it" if load else ""
    lines += ["", f"{run['dataset']}, {run['num_queries']} queries, k={run['k']}{how}{quiet}; recorded with "
                  f"`{recorded['command']}`."]
    return "\n".join(lines)


def budget_table(recorded: dict) -> str:
    """The static query side's added-term budget: quality against QPS (benchmarks/bench_budget.py)."""
    lines = ["| budget (added terms) | added terms / query | dev nDCG@10 | test nDCG@10 | QPS 1 thread | QPS 2 threads "
             "| / bm25-flat, 1 thread | / bm25-flat, 2 threads |", "|" + "---|" * 8]
    for row in recorded["rows"]:
        name = {0: "none (every added term)"}.get(row["budget"], str(row["budget"]))
        added = f"{row['added_terms']:.1f}" if "added_terms" in row else ""
        lines.append(f"| {name} | {added} | {row['dev_ndcg@10']:.4f} | {row['test_ndcg@10']:.4f} | {row['qps_1t']:,.0f} | "
                     f"{row['qps_2t']:,.0f} | {row['qps_1t_over_flat']:.2f}x | {row['qps_2t_over_flat']:.2f}x |")
    lines += ["", f"{recorded['dataset']}: dev = the {recorded['dev_queries']} queries the model's run held out, test = "
                  f"{recorded['test_queries']} queries; QPS of batches of {recorded['batch']} (the test queries, repeated), "
                  f"k={recorded['k']}; `{recorded['checkpoint']}`; recorded with `{recorded['command']}`."]
    return "\n".join(lines)


def profile_table(recorded: dict) -> str:
    """A training step's parts, in ms and as a share of the step (research/profile_training.py)."""
    step = recorded["ms_a_step"]
    parts = sorted(recorded["parts_ms"].items(), key=lambda kv: -kv[1]) + [("the rest (masks, sums, scheduler)",
                                                                          recorded["rest_ms"])]
    lines = ["| part of a step | ms | share |", "|---|---|---|"]
    lines += [f"| {name} | {ms:,.1f} | {ms / step:.1%} |" for name, ms in parts]
    lines += [f"| **a step** ({recorded['batch_size']} queries, {recorded['random_negatives']:,} random negatives, "
              f"torch on {recorded['torch_threads']} threads) | {step:,.1f} | 100% |", "",
              f"One dev evaluation ({recorded['dev_queries']:,} queries) took {recorded['dev_s']:.1f} s, as long as "
              f"{recorded['dev_s'] * 1000 / step:.0f} steps. Recorded with `{recorded['command']}`."]
    return "\n".join(lines)


def ab_table(recorded: dict) -> str:
    """Median QPS of two checkouts over alternating rounds, and new over base (benchmarks/ab_term_lists.py)."""
    base, new = recorded["medians"]["base"], recorded["medians"]["new"]
    lines = ["| path | before QPS | after QPS | after / before |", "|---|---|---|---|"]
    lines += [f"| {k} | {base[k]:,.0f} | {new[k]:,.0f} | {new[k] / base[k]:.2f}x |" for k in new]
    return "\n".join(lines + ["", f"{len(recorded['rounds']['new'])} rounds on {recorded['dataset']}, each checkout's "
                                   f"median; before: {recorded['base']}; after: {recorded['new']}. Recorded with "
                                   f"`{recorded['command']}`."])


def bench_table(name: str) -> str:
    recorded = json.loads(BENCH_DATA[name].read_text(encoding="utf-8"))
    tables = {"speed": speed_table, "throughput": throughput_table, "scale": lambda r: scale_table(r["rows"]),
              "extrapolation": lambda r: extrapolate(r["rows"]),
              "serve": serve_table, "encoders": lambda r: speed_table(r, qps=False), "two-core": two_core_table,
              "two-core-nolayer": two_core_table, "profile": profile_table,
              "static": static_table, "term-lists": ab_table, "seams": ab_table, "cluster": cluster_table, "cluster-ingest": ingest_table, "cluster-sizing": sizing_table, "general-models": models_table,
              "budget": budget_table, "feedback-choice": choice_table, "hybrid-fusion": fusion_table,
              "hybrid-cost": cost_table, "dense-precision": precision_table, "dense-split": precision_table, "english-analyzer": analyzer_table,
              "hnsw": hnsw_table, "student-fidelity": fidelity_table}
    return tables[name](recorded)


def render(text: str, conditions: list) -> str:
    """``text`` with every generated block replaced by what its data says now."""
    def block(m: re.Match) -> str:
        kind, table = m.group("kind"), m.group("table")
        body = reproductions_table(table, conditions) if kind == "reproductions" else bench_table(table)
        return f"<!-- {kind}:{table} -->\n{body}\n<!-- /{kind} -->"

    return _BLOCK.sub(block, text)


def write_docs(conditions: list) -> list[Path]:
    """Rewrite the generated blocks of every file that holds one; returns the files changed."""
    changed = []
    for path in doc_files():
        text = path.read_text(encoding="utf-8")
        new = render(text, conditions)
        if new != text:
            atomic_write_text(path, new)
            changed.append(path)
    return changed
