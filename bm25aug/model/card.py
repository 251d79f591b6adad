"""A model folder's ``README.md``: what the model is, how it was trained and what it measured.

As a Hugging Face or sentence-transformers model folder does, a bm25aug model says what it is
without its training run beside it: ``save_pretrained`` writes the model's own settings, and a
training run adds its recipe, data, dev selection and the dev metrics measured at its end.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

CARD_NAME = "README.md"
TRAINING = "## Training"  # the heading of what a training run adds when it ends (``card_text``)
_TARGETS = {"flat": "flat: Lucene's default English analyzer, as Pyserini's stock BEIR and MS MARCO indexes",
            "wp": "wp: bert-base-uncased WordPiece tokens (`bm25aug index --flavor wp`)"}


def card_text(config, layers: int, training: dict | None = None) -> str:
    """The card of a model with ``config`` (an ``AugmenterConfig``) on an encoder of ``layers``
    layers; ``training``: what a training run adds (see ``bm25aug.train.trainer.Trainer``)."""
    a = (f"on; used for queries with at most {config.aug_gate} proposed terms" if config.aug_gate else "on")
    static = getattr(config, "query_side", "contextual") == "static"
    query_side = ("static: a learned weight and expansion list per term, looked up; no encoder at query time "
                  f"(tokenizer of {config.encoder})" if static else f"the encoder {config.encoder} ({layers} layers)")
    rows = [("query side", query_side), ("target index", _TARGETS.get(config.target, config.target)),
            ("per-token weights w(q)", f"on, at least {config.weight_floor:g}" if config.use_weights else "off (w = 1)"),
            ("added terms a(q)", a if config.use_augmentation else "off (a = 0)"),
            *([] if static else [("a(q) pooling", config.pooling), ("query window", f"{config.max_query_length} tokens")]),
            ("learned feedback", f"reads the top {config.feedback_terms} RM3 terms of a first BM25 search"
             if config.reads_feedback else "off (reads the query alone)"),
            ("vocabulary hash", config.vocab_hash or "-")]
    lines = ["# bm25aug query augmenter", "",
             "A query rewriter for BM25: it reads a query and returns weighted terms that Lucene scores on a stock "
             "index. Documents are never re-encoded.", "", "| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    if training:
        lines += ["", TRAINING, "", f"Trained on `{training['dataset']}` ({training['examples']} training queries), "
                  f"finished {training['finished']}.", "",
                  f"Dev selection on the {_dev(training['dev_how'], training['dev_queries'])}: "
                  f"{training['metric']} {training['best']:.4f} against {training['bm25']:.4f} for plain BM25 on the "
                  f"same queries{_selection(training.get('selection'))}.", "",
                  "Recipe (`bm25aug train` settings):", "", "```json", training["recipe"], "```"]
    lines += ["", "## Use", "", "```python", "from bm25aug import AugmentedSearcher", "",
              'searcher = AugmentedSearcher.from_pretrained("path/to/this/folder", "path/to/a/lucene/index")',
              'print(searcher.augment("a query").explain())', "```", ""]
    return "\n".join(lines)


def _dev(how: str, queries: int) -> str:
    return how if "queries" in how else f"{how} ({queries} queries)"


def _selection(selection: dict | None) -> str:
    if not selection:
        return ""
    verdict = "kept" if selection["kept"] else "not significant, so this model is plain BM25 (w = 1, a = 0)"
    return f"; paired one-sided t-test p = {selection['p_value']:.2g} ({verdict})"


def finished_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def write_card(folder: str | Path, text: str) -> None:
    from bm25aug.io import atomic_write_text

    atomic_write_text(Path(folder) / CARD_NAME, text)


def run_ended(folder: str | Path) -> bool:
    """Whether the model in ``folder`` is a training run's final one: its card holds what the run
    adds when it ends (the callbacks after the last epoch have run)."""
    try:
        return f"\n{TRAINING}\n" in (Path(folder) / CARD_NAME).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
