"""The cluster benchmark's tables (``benchmarks/bench_cluster.py --record``, in
``docs/data/bench_cluster.json``): speed against in-process Lucene and the native ``match`` query,
what an ingest costs, and, on paper, what NQ's and MS MARCO v2.1's passages would take.

The paper sizing reads the largest corpus measured and scales it by passages and words a passage;
its inputs that were not measured here are named in ``TARGETS`` and in the table's notes.
"""

from __future__ import annotations

import math

NATIVE = "native match (opensearch-py)"
GB = 1e9
# Corpora sized on paper: passages, words a passage, and where the numbers come from.
TARGETS = {
    "NQ (Wikipedia, DPR's passages)": (21_015_324, 100, "DPR's 100-word passages"),
    "MS MARCO v2.1 segmented": (113_520_750, 150, "TREC RAG 2024's segments; 150 words a segment assumed"),
}
SHARD_TARGET_GB = 25  # a primary shard's size to aim at: the middle of OpenSearch's 10-50 GB advice
CACHE_GB_PER_NODE = 16  # page cache a node gives its shards (a 32 GB node with a 16 GB heap)
MIN_NODES = 3  # three manager-eligible nodes: any one may die (docs/scale-out.md)


def corpus_name(run: dict) -> str:
    return "SciFact" if run["num_docs"] < 10_000 else f"{run['num_docs'] / 1e6:g}M"


def _qps(row: dict, key: str) -> str:
    return f"{row[key + '_qps_1t']:,.0f} / {row[key + '_qps_2t']:,.0f}" if key + "_qps_1t" in row else "—"


def _ratio(row: dict, base: dict, key: str) -> str:
    return f"{row[key + '_qps_2t'] / base[key + '_qps_2t']:.2f}x" if key + "_qps_2t" in row else "—"


def cluster_table(results: list[dict]) -> str:
    """QPS of each target over in-process Lucene's, and a cluster query's parts."""
    lines = ["| corpus | target | bm25-flat QPS 1 / 2 threads | augmented QPS 1 / 2 threads | bm25-flat / in-process "
             "(2 threads) | augmented / in-process (2 threads) | ms a query: JSON / cluster / HTTP |",
             "|---|---|---|---|---|---|---|"]
    for run in results:
        base = run["rows"]["in-process"]
        for label, row in run["rows"].items():
            parts = row.get("breakdown_ms")
            split = f"{parts['json']:.1f} / {parts['cluster']:.1f} / {parts['http']:.1f}" if parts else ""
            lines.append(f"| {corpus_name(run)} | {label} | {_qps(row, 'bm25_flat')} | {_qps(row, 'augmented')} | "
                         f"{_ratio(row, base, 'bm25_flat')} | {_ratio(row, base, 'augmented')} | {split} |")
    first = results[0]
    notes = [f"SciFact's {first['queries']} test queries, k={first['k']}, term lists written beforehand by "
             f"`{first['checkpoint']}`; each corpus's rows are of one run, on one 2-core machine. 1M is SciFact "
             f"padded to 1M passages (`benchmarks/scale.py`), searched with the same queries; the JSON / cluster "
             f"/ HTTP split is of augmented queries, one at a time."]
    for run in results:
        native = run["rows"].get(NATIVE)
        agree = _agreement(native, run["queries"]) if native else ""
        where = run.get("cluster")
        engine = f" on {where['engine']}, {where['nodes']} nodes" if where else ""
        notes.append(f"{corpus_name(run)}: recorded with `{run['command']}`{engine}.{agree}")
    return "\n".join(lines + [""] + notes)


def _agreement(native: dict, queries: int) -> str:
    """How the native ``match`` query's top 10 compare with bm25aug's bm25-flat."""
    text = f" The native `match` query's top 10 equal bm25aug's, id for id, for {native['same_top10']} of {queries} queries"
    scored = native.get("same_scores_top10")
    if scored is None or native["same_top10"] == queries:
        return text + "."
    if scored == queries:
        return text + "; the others have the same score at every rank, and differ only in which documents tied on a score come first."
    return text + f"; score for score at every rank for {scored}."


def ingest_table(results: list[dict]) -> str:
    """Each index's ingest time and rate and its size, beside the in-process folder's size."""
    lines = ["| corpus | index | ingest | documents a second | size (primaries) | size (with replicas) |",
             "|---|---|---|---|---|---|"]
    for run in results:
        for label, row in run["rows"].items():
            if "total_bytes" not in row:
                continue
            took = f"{row['ingest_s'] / 60:.1f} min" if "ingest_s" in row else "(reused)"
            rate = f"{row['docs_per_s']:,.0f}" if "docs_per_s" in row else "—"
            own = label == "in-process"  # one folder, no replicas: its size is under primaries
            primary = row["total_bytes"] if own else row.get("primary_bytes")
            sizes = ["—" if size is None else f"{size / GB:.2f} GB" for size in (primary, None if own else row["total_bytes"])]
            index = label if own else f"{label}, {row['replicas']} replica"
            lines.append(f"| {corpus_name(run)} | {index} | {'—' if own else took} | {rate} | {sizes[0]} | {sizes[1]} |")
    return "\n".join(lines + ["", "Sizes after the ingest's merge to one segment a shard; an ingest's time includes "
                                  "it. Recorded by the same runs as the table above."])


def _largest(results: list[dict]) -> tuple[dict, dict]:
    run = max(results, key=lambda r: r["num_docs"])
    rows = [row for label, row in run["rows"].items() if "ingest_s" in row and label != "in-process"]
    return run, max(rows, key=lambda row: row["shards"])


def sizing_table(results: list[dict]) -> str:
    """Shards, nodes, disk and ingest time for NQ's and MS MARCO v2.1's passages, on paper, from
    the largest corpus measured (bytes a word indexed, documents a second on this machine)."""
    run, row = _largest(results)
    per_word = row["primary_bytes"] / (run["num_docs"] * run["words_per_doc"])
    lines = ["| corpus | passages | primaries | primary shards | with 1 replica | nodes | ingest at the measured rate |",
             "|---|---|---|---|---|---|---|"]
    for name, (passages, words, _) in TARGETS.items():
        primary = passages * words * per_word
        total = 2 * primary
        nodes = max(MIN_NODES, math.ceil(total / (CACHE_GB_PER_NODE * GB)))
        shards = max(math.ceil(primary / (SHARD_TARGET_GB * GB)), math.ceil(nodes / 2))  # every node holds a copy
        hours = passages * words / (row["docs_per_s"] * run["words_per_doc"]) / 3600  # at the measured words a second
        lines.append(f"| {name} | {passages / 1e6:,.1f}M | {primary / GB:,.0f} GB | {shards} | {total / GB:,.0f} GB | "
                     f"{nodes} | {hours:,.1f} h on this 2-core machine |")
    notes = [f"From the {corpus_name(run)} row: {per_word:.2f} bytes a word indexed (primaries, "
             f"{run['words_per_doc']:.0f} words a passage), {row['docs_per_s']:,.0f} documents a second into "
             f"{row['shards']} shards with {row['replicas']} replica, every node and the client on 2 cores; "
             f"sizes and ingest hours scale with passages times words a passage."]
    notes += [f"{name}: {source}." for name, (_, _, source) in TARGETS.items()]
    notes.append(f"Nodes enough to hold primaries and a replica in {CACHE_GB_PER_NODE} GB of page cache each, and "
                 f"at least {MIN_NODES}; primary shards of at most {SHARD_TARGET_GB} GB, and enough that every node "
                 f"holds a copy of one.")
    return "\n".join(lines + [""] + notes)


def analyzer_table(results: list[dict]) -> str:
    """OpenSearch's built-in ``english`` analyzer against the flat index's, per engine and dataset
    (``benchmarks/english_analyzer.py --record``, in ``docs/data/english_analyzer.json``): texts
    checked and how many differ, the probe text, the first difference if any, and each command."""
    lines = ["| engine | dataset | documents | documents that differ | distinct queries | queries that differ |",
             "|---|---|---|---|---|---|"]
    notes = ["Each text's tokens through the cluster's `_analyze` on an index's `text` field with `\"analyzer\": "
             "\"english\"` (or the built-in analyzer a row names, a control), against the flat index's (Anserini's "
             "English analyzer, in process), by the check `?field=` runs (`FieldAnalysis`): every document, title "
             "and text joined as the flat index joins them, and every distinct query text of every split."]
    for run in results:
        engine = run["engine"].replace("opensearch", "OpenSearch", 1)
        engine += f", `{run['analyzer']}`" if run["analyzer"] != "english" else ""
        for row in run["datasets"]:
            lines.append(f"| {engine} | {row['dataset']} | {row['documents']:,} | {row['documents_differ']:,} | "
                         f"{row['queries']:,} | {row['queries_differ']:,} |")
            if first := (row["document_differences"] + row["query_differences"])[:1]:
                notes.append(f"{engine}, {row['dataset']}: the first difference in {_where(first[0])}: "
                             f"{_first(first[0])}.")
        probe = f"differs, {_first(run['probe_difference'])}" if run["probe_differs"] else "the same tokens"
        commands = " and ".join(f"`{c}`" for c in dict.fromkeys(row["command"] for row in run["datasets"]))
        notes.append(f"{engine}: the probe text (`field_analysis.PROBE`): {probe}. Recorded with {commands}.")
    return "\n".join(lines + [""] + notes)


def _first(message: str) -> str:
    """The product's difference message (``field_analysis.difference``) cut to its first difference."""
    return message.partition("(first difference at ")[2].partition("); fix:")[0] or message


def _where(message: str) -> str:
    """The text a difference message names (``in document '4983'``)."""
    return message.partition(" sends: in ")[2].partition(" (")[0] or "a text"
