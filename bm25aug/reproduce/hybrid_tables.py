"""The tables of hybrid search's recorded runs: the fusion chosen on the shared sets' dev splits
(``research/hybrid_defaults.py``, ``docs/data/hybrid_defaults.json``), what a hybrid costs
beside bm25-flat (``benchmarks/bench_hybrid.py``, ``docs/data/hybrid_cost.json``), and the dense
side's two exports, fp32 and int8 (``benchmarks/bench_dense_precision.py``,
``docs/data/dense_precision.json``)."""

from __future__ import annotations

SIDES = ("bm25-flat", "general")


def fusion_table(recorded: dict) -> str:
    """Per candidate fusion, each dev set's main metric for the two hybrids, and their means."""
    sets = recorded["sets"]
    metric = {name: "acc@5" if "acc@5" in r["dense"] else "ndcg@10" for name, r in sets.items()}
    lines = ["| fusion | " + " | ".join(f"{n} {r['split']} ({metric[n]}): bm25-flat / general hybrid"
                                         for n, r in sets.items()) + " | mean: bm25-flat / general hybrid |",
             "|---|" + "---|" * (len(sets) + 1)]
    for name, means in recorded["means"].items():
        cells = [" / ".join(f"{r[f'{side}-hybrid'][name][metric[n]]:.4f}" for side in SIDES) for n, r in sets.items()]
        mean = " / ".join(f"{means[side]:.4f}" for side in SIDES)
        mark = "**" if name == recorded["chosen"] else ""
        lines.append(f"| {mark}{name}{mark} | " + " | ".join(cells) + f" | {mark}{mean}{mark} |")
    alone = [" / ".join(f"{r[m][metric[n]]:.4f}" for m in ("bm25-flat", "general", "dense")) for n, r in sets.items()]
    lines.append("| alone: bm25-flat / general / dense | " + " | ".join(alone) + " | |")
    notes = [f"{n} {r['split']}: {r['default_general_vs_bm25_hybrid']['mean_diff']:+.4f} "
             f"({r['default_general_vs_bm25_hybrid']['better']} queries better, "
             f"{r['default_general_vs_bm25_hybrid']['worse']} worse, paired t-test p = "
             f"{r['default_general_vs_bm25_hybrid']['p']:.3f})" for n, r in sets.items()
             if "default_general_vs_bm25_hybrid" in r]
    paired = f" The general hybrid against the bm25-flat hybrid, query by query, at the default: {'; '.join(notes)}." \
        if notes else ""
    return "\n".join(lines + ["", f"Chosen: **{recorded['chosen']}**, the best mean for the general hybrid.{paired} "
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
    return "\n".join(lines + ["", f"{recorded['dataset']} {recorded['split']}, {recorded['queries']} queries, "
                                   f"k={recorded['k']}, fusion {recorded['fusion']}; the dense side's corpus encoding "
                                   f"took {recorded['corpus_encode_s']:,.0f} s once (cached), its embeddings "
                                   f"{recorded['embeddings_mb']:.1f} MB. Recorded with `{recorded['command']}`."])


def precision_table(recorded: dict) -> str:
    """Per dataset and export: test nDCG@10, corpus documents per second and a query's encoding."""
    lines = ["| dataset | export | nDCG@10 | minus fp32's | corpus docs/s | x fp32's | query p50 ms | query p95 ms "
             "| query tokens p50 / p99 / max |", "|---|---|---|---|---|---|---|---|---|"]
    for name, row in recorded["datasets"].items():
        for model, m in row["models"].items():
            diff = f"{m['ndcg@10_minus_first']:+.4f}" if "ndcg@10_minus_first" in m else ""
            ratio = f"{m['docs_per_s_over_first']:.2f}x" if "docs_per_s_over_first" in m else ""
            tokens = m["query_tokens"]
            lines.append(f"| {name} {row['split']} | {model} | {m['ndcg@10']:.4f} | {diff} | {m['docs_per_s']:.2f}"
                         f"{' (cached)' if m['cached'] else ''} | {ratio} | {m['query_ms']['p50']:.2f} | "
                         f"{m['query_ms']['p95']:.2f} | {tokens['p50']:.0f} / {tokens['p99']:.0f} / {tokens['max']} |")
    load = " to ".join(f"{a[0]:.1f}" for a in (recorded["load_before"], recorded["load_after"]))
    return "\n".join(lines + ["", f"One run on {recorded['cores']} cores (load average {load}); each corpus encoded "
                                   f"once per export, a query encoded alone (its instruction included in its tokens). "
                                   f"Recorded with `{recorded['command'].strip()}`."])
