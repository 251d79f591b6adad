"""What an adapted folder says about itself: an ``## Adaptation`` section on the model card, and
``adapt.json`` beside the model (the settings, the gate's verdict and each step's cost)."""

from __future__ import annotations

from pathlib import Path

from bm25aug.io import write_json
from bm25aug.model.card import CARD_NAME, write_card

HEADING = "## Adaptation"


def section(info: dict) -> str:
    a, cost = info["adapt"], info["cost"]
    steps = ", ".join(f"{name} {c['seconds']:.0f} s" for name, c in cost.items())
    target = ("the teacher's scores" if not a.get("mix") else
              f"a mix of the teacher's scores and plain BM25's ({1 - a['mix']:g} and {a['mix']:g})")
    return "\n".join([
        HEADING, "",
        f"Adapted with `bm25aug adapt` to the corpus `{info['corpus']}` ({info['documents']:,} documents) with no "
        f"queries and no judgements: {info['train_queries']:,} pseudo-queries of kind `{a['kind']}` made from its "
        f"documents, each with BM25's top {info['depth']} on the flat index as candidates, scored by the teacher "
        f"({info['teacher']}); trained toward {target} ({a['loss']}, {a['candidates']} candidates a query a step) "
        f"from {info['start']}.", "",
        f"Label-free gate, on {info['dev_queries']} held-out pseudo-queries judged by the teacher: {info['gate']}.", "",
        f"Cost on this machine: {steps}.", ""])


def write(out: Path, info: dict) -> None:
    """``adapt.json`` in the run folder, and the card's section in best/."""
    write_json(out / "adapt.json", info)
    card = out / "best" / CARD_NAME
    if card.exists():
        text = card.read_text(encoding="utf-8")
        if (at := text.find(f"\n{HEADING}\n")) >= 0:  # an earlier section: replaced
            end = text.find("\n## ", at + 1)
            text = text[:at + 1] + (text[end + 1:] if end >= 0 else "")
        use = text.find("## Use")
        body = text[:use] + section(info) + "\n" + text[use:] if use >= 0 else text + section(info)
        write_card(out / "best", body)
