"""reproductions.yaml is the one source of the README's result tables, and its fast subset
(the exact BM25 baselines) reproduces on every CI run."""

import dataclasses
from pathlib import Path

from bm25aug.reproduce import load_conditions, main, render_readme

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_blocks_agree_with_reproductions_yaml():
    text = README.read_text()
    assert "<!-- reproductions:scifact -->" in text
    assert render_readme(text, load_conditions()) == text, "run: python -m bm25aug.reproduce --write-readme"


def test_changing_an_expected_value_breaks_the_readme_check():
    conditions = load_conditions()
    conditions[0] = dataclasses.replace(conditions[0], expected={**conditions[0].expected, "ndcg@10": 0.1234})
    assert render_readme(README.read_text(), conditions) != README.read_text()


def test_fast_conditions_reproduce(data_dir, tmp_path):
    """Every BM25 baseline of the README, re-run as its command is written, within its tolerance."""
    assert main(["--fast", "--out", str(tmp_path)]) == 0
    table = (tmp_path / "reproduce.md").read_text()
    assert "✘" not in table and table.count("✔") == sum(len(c.expected) for c in load_conditions() if c.fast)
