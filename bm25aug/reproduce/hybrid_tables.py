"""The tables of hybrid search's recorded runs: the fusion chosen on the shared sets' dev splits
(``research/hybrid_defaults.py``, ``docs/data/hybrid_defaults.json``), what a hybrid costs
beside bm25-flat (``benchmarks/bench_hybrid.py``, ``docs/data/hybrid_cost.json``), and the dense
side's exports, fp32, int8 and the two split (``benchmarks/bench_dense_precision.py``,
``docs/data/dense_precision.json``)."""

from __future__ import annotations

SIDES = ("bm25-flat", "general")


def fusion_table(recorded: dict) -> str:
    """Per candidate fusion, each dev set's main metric for the two hybrids, and their means."""
    sets = recorded["sets"]
    metric = {name: "acc@5" if "acc@5" in r["dense"] else "ndcg@10" for name, r in sets.items()}
    worst = recorded.get("worst_shortfall")  # below the better half, on the worst set (the choice's bar)
    on = f" over {', '.join(recorded['chosen_on'])}" if "chosen_on" in recorded else ""
    extra = f" worst set{on}, against the better half: bm25-flat / general hybrid |" if worst else ""
    lines = ["| fusion | " + " | ".join(f"{n} {r['split']} ({metric[n]}): bm25-flat / general hybrid"
                                         for n, r in sets.items()) + f" | mean{on}: bm25-flat / general hybrid |" + extra,
             "|---|" + "---|" * (len(sets) + 1 + bool(worst))]
    for name, means in recorded["means"].items():
        cells = [" / ".join(f"{r[f'{side}-hybrid'][name][metric[n]]:.4f}" for side in SIDES) for n, r in sets.items()]
        mean = " / ".join(f"{means[side]:.4f}" for side in SIDES)
        mark = "**" if name == recorded["chosen"] else ""
        tail = f" {' / '.join(f'{worst[name][side]:+.4f}' for side in SIDES)} |" if worst else ""
        lines.append(f"| {mark}{name}{mark} | " + " | ".join(cells) + f" | {mark}{mean}{mark} |" + tail)
    alone = [" / ".join(f"{r[m][metric[n]]:.4f}" for m in ("bm25-flat", "general", "dense")) for n, r in sets.items()]
    lines.append("| alone: bm25-flat / general / dense | " + " | ".join(alone) + " | |" + (" |" if worst else ""))
    notes = [f"{n} {r['split']}: {r['default_general_vs_bm25_hybrid']['mean_diff']:+.4f} "
             f"({r['default_general_vs_bm25_hybrid']['better']} queries better, "
             f"{r['default_general_vs_bm25_hybrid']['worse']} worse, paired t-test p = "
             f"{r['default_general_vs_bm25_hybrid']['p']:.3f})" for n, r in sets.items()
             if "default_general_vs_bm25_hybrid" in r]
    paired = f" The general hybrid against the bm25-flat hybrid, query by query, at the default: {'; '.join(notes)}." \
        if notes else ""
    if worst:
        bar = recorded["shortfall_bar"]
        rule = (f"the best mean{on} for the general hybrid among the fusions never more than {bar:g} below the better "
                f"of its halves on any of them" if recorded["chosen_within_bar"] else
                f"no fusion was within {bar:g} of the better half on every set; the one whose worst set is least below")
    else:
        rule = "the best mean for the general hybrid"
    return "\n".join(lines + ["", f"Chosen: **{recorded['chosen']}**, {rule}.{paired} "
                                   f"Recorded with `{recorded['command']}`."])


def cost_table(recorded: dict) -> str:
    """Latency and QPS of each path, and its ratio to bm25-flat's, from one run."""
    threads = list(recorded["qps"])
    lines = ["| path | p50 ms | p95 ms | p50 / bm25-flat's | " + " | ".join(f"QPS, {t} thread(s) (x bm25-flat's)"
                                                                     for t in threads) + " |",
             "|---|---|---|---|" + "---|" * len(threads)]
    for name, lat in recorded["latency_ms"].items():
        rates = [f"{recorded['qps'][t][name]['qps']:,.0f} (x{recorded['qps'][t][name]['over_first']:.3g})" for t in threads]
        lines.append(f"| {name} | {lat['p50']:.2f} | {lat['p95']:.2f} | {lat['p50_over_bm25']:.1f} | " + " | ".join(rates) + " |")
    model = f" ({recorded['dense_model']} unless named)" if "dense_model" in recorded else ""
    load = (f"; load average {recorded['load_before'][0]:.1f} before, {recorded['load_after'][0]:.1f} after"
            if "load_after" in recorded else "")
    return "\n".join(lines + ["", f"{recorded['dataset']} {recorded['split']}, {recorded['queries']} queries, "
                                   f"k={recorded['k']}, fusion {recorded['fusion']}; the dense side's{model} corpus "
                                   f"encoding took {recorded['corpus_encode_s']:,.0f} s once (cached), its embeddings "
                                   f"{recorded['embeddings_mb']:.1f} MB{load}. Recorded with `{recorded['command']}`."])


def precision_table(recorded: dict) -> str:
    """Per dataset and export: test nDCG@10, corpus documents per second and a query's encoding."""
    models = next(iter(recorded["datasets"].values()))["models"]
    caps, base = list(next(iter(models.values())).get("ndcg@10_query_cap", {})), next(iter(models))
    lines = [f"| dataset | export | nDCG@10 | ΔnDCG@10 vs {base} | R@100 | ΔR@100 vs {base} | corpus docs/s | speed-up "
             "| query encode p50 / p95 ms | query tokens p50 / p99 / max |"
             + "".join(f" nDCG@10, queries {'uncut (512)' if c == '512' else f'cut at {c} tokens'} |" for c in caps),
             "|---|" * 1 + "---|" * (9 + len(caps))]
    for name, row in recorded["datasets"].items():
        first = next(iter(row["models"].values()))
        for model, m in row["models"].items():
            later = m is not first
            ratio = f"{m['docs_per_s'] / first['docs_per_s']:.2f}x" if later else ""
            deltas = [f"{m[key] - first[key]:+.4f}" if later else "" for key in ("ndcg@10", "recall@100")]
            tokens = m["query_tokens"]
            lines.append(f"| {name} {row['split']} | {model} | {m['ndcg@10']:.4f} | {deltas[0]} | {m['recall@100']:.4f} | "
                         f"{deltas[1]} | {m['docs_per_s']:.2f}{' (cached)' if m['cached'] else ''} | {ratio} | "
                         f"{m['query_ms']['p50']:.2f} / {m['query_ms']['p95']:.2f} | "
                         f"{tokens['p50']:.0f} / {tokens['p99']:.0f} / {tokens['max']} |"
                         + "".join(f" {m['ndcg@10_query_cap'][c]:.4f} |" for c in caps))
    load = " and ".join(f"{a[0]:.1f}" for a in (recorded["load_before"], recorded["load_after"]))
    return "\n".join(lines + ["", f"One run on {recorded['cores']} cores (load average {load}, sampled at its start and "
                                   f"end only). A corpus's documents per second are those of its one encoding, read "
                                   f"from the cache's record when it was made before (cached). A query's encoding "
                                   f"alone is timed over the first {recorded.get('latency_queries', 200)} queries, "
                                   f"its instruction included in its tokens. Recorded with "
                                   f"`{recorded['command'].strip()}`."])


def hnsw_table(recorded: dict) -> str:
    """The HNSW index's runs against exact search, one row per efSearch (benchmarks/bench_hnsw.py)."""
    from bm25aug.dense.hnsw import EF_SEARCH

    lines = ["| efSearch | recall@10 | recall@100 | search p50 ms |", "|---|---|---|---|"]
    for ef, row in sorted(recorded["ef"].items(), key=lambda kv: int(kv[0])):
        name = f"{ef} (the default, `EF_SEARCH`)" if int(ef) == EF_SEARCH else ef
        lines.append(f"| {name} | {row['recall@10']:.4f} | {row['recall@100']:.4f} | {row['p50_ms']:.1f} |")
    load = ", ".join(f"{x:.1f}" for x in recorded["load"])
    return "\n".join(lines + ["", f"{recorded['dataset']}, {recorded['documents']:,} documents, {recorded['queries']} "
                                   f"queries, {recorded['model']}, M {recorded['M']}, efConstruction {recorded['efC']}: "
                                   f"exact search p50 {recorded['exact_p50_ms']:.1f} ms, build {recorded['build_seconds']:.1f} s; "
                                   f"load average {load}. Recorded with `{recorded['command']}`."])
