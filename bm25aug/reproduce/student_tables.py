"""The table of students' fidelity to their teacher (research/student_fidelity.py --json-out)."""

from __future__ import annotations


def fidelity_table(recorded: dict) -> str:
    """One row a model (bm25-flat first), one nDCG@10 / weight r column a set, and their mean over queries."""
    sets = recorded["sets"]
    models = list(next(iter(sets.values()))["students"])
    total = sum(row["queries"] for row in sets.values())
    head = " | ".join(f"{name} ({row['queries']:,} queries)" for name, row in sets.items())
    lines = [f"| model | {head} | mean over {total:,} queries |", "|---" * (len(sets) + 2) + "|"]
    for model in models:
        cells, means = [], []
        for metric in ("ndcg@10_vs_teacher", "weight_r"):
            means.append(sum(row["students"][model][metric] * row["queries"] for row in sets.values()) / total)
        for row in sets.values():
            got = row["students"][model]
            cells.append(f"{got['ndcg@10_vs_teacher']:.4f}" + ("" if got["weight_r"] != got["weight_r"]
                                                               else f" / r {got['weight_r']:.4f}"))
        mean = f"{means[0]:.4f}" + ("" if means[1] != means[1] else f" / r {means[1]:.4f}")
        lines.append(f"| {model} | {' | '.join(cells)} | {mean} |")
    return "\n".join(lines + ["", f"Each cell: nDCG@10 of the model's ranking against `{recorded['teacher']}`'s top 10 "
                                  f"(and r, the correlation of their term weights). Recorded with "
                                  f"`{recorded['command']}`."])
