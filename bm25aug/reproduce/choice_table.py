"""The table of ``research/feedback_choice.py``'s recorded run (``docs/data/feedback_choice.json``):
per corpus, the general model alone and with RM3 on real dev queries, and what each label-free
signal picks between them."""

from __future__ import annotations

MODES = ("augmented", "augmented-rm3")


def choice_table(recorded: dict) -> str:
    rows, summary = recorded["rows"], recorded["summary"]
    signals = list(rows[0]["signals"])
    lines = ["| corpus | dev queries | metric | augmented | augmented-rm3 | "
             + " | ".join(f"{s}: its nDCG@10, alone / RM3 → pick" for s in signals) + " |",
             "|" + "---|" * (5 + len(signals))]
    for row in rows:
        truth = row["truth"]
        best = max(MODES, key=lambda m: truth[m])
        cells = []
        for s in signals:
            v, pick = row["signals"][s], row["picks"][s]
            right = "right" if truth[pick] >= truth[next(m for m in MODES if m != pick)] else "wrong"
            cells.append(f"{v['augmented']:.3f} / {v['augmented-rm3']:.3f} → {'RM3' if pick != 'augmented' else 'alone'}"
                         f" ({right})")
        lines.append(f"| {row['dataset']} | {row['dev_queries']} | {row['metric']} | "
                     + " | ".join(f"**{truth[m]:.4f}**" if m == best else f"{truth[m]:.4f}" for m in MODES)
                     + " | " + " | ".join(cells) + " |")
    right = " | ".join(f"right on {summary[s]['right']} of {summary[s]['of']}, mean {summary[s]['mean_picked']:.4f}"
                       for s in signals)
    lines.append(f"| picks: mean of the picked mode's dev metric | | | {summary['always augmented']['mean_picked']:.4f} | "
                 f"{summary['always augmented-rm3']['mean_picked']:.4f} | {right} |")
    lines += ["", f"The better of the two on each corpus (an oracle): mean {summary['oracle']['mean_picked']:.4f}. "
                  f"Recorded with `{recorded['command']}`."]
    return "\n".join(lines)
