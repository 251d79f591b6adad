"""reproductions.yaml and the recorded benchmark runs (docs/data/) are the one source of the
tables of README.md and docs/, and the fast subset (the exact BM25 baselines) reproduces on every
CI run."""

import dataclasses
from pathlib import Path

from bm25aug.reproduce.conditions import load_conditions, main
from bm25aug.reproduce.tables import BENCH_DATA, doc_files, render

README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_generated_table_agrees_with_its_data():
    conditions, blocks = load_conditions(), ""
    for path in doc_files():
        text = path.read_text()
        blocks += "".join(line for line in text.splitlines(keepends=True) if line.startswith("<!-- "))
        assert render(text, conditions) == text, f"{path}: run python -m bm25aug.reproduce --write-readme"
    for name in ("headline", "scifact", "targets", "scifact-ablations", "scifact-sweep", "nfcorpus-squad", "general",
                 "feedback"):
        assert f"<!-- reproductions:{name} -->" in blocks
    for name in ("speed", "throughput", "encoders", "scale", "serve", "two-core", "two-core-nolayer", "term-lists"):
        assert f"<!-- bench:{name} -->" in blocks
    assert "<!-- reproductions:headline -->" in README.read_text() and "<!-- bench:throughput -->" in README.read_text()


def test_changing_a_recorded_benchmark_breaks_the_docs_check(tmp_path, monkeypatch):
    import json

    from bm25aug.reproduce import tables

    speed = json.loads(BENCH_DATA["speed"].read_text())
    speed["runs"][0]["paths"]["augmented"]["p50_ms"] += 1
    (tmp_path / "speed.json").write_text(json.dumps(speed))
    text = (README.parent / "docs" / "speed.md").read_text()
    monkeypatch.setitem(tables.BENCH_DATA, "speed", tmp_path / "speed.json")
    assert render(text, load_conditions()) != text


def test_changing_an_expected_value_breaks_the_readme_check():
    conditions = load_conditions()
    conditions[0] = dataclasses.replace(conditions[0], expected={**conditions[0].expected, "ndcg@10": 0.1234})
    assert render(README.read_text(), conditions) != README.read_text()


def test_fast_conditions_reproduce(data_dir, tmp_path):
    """Every BM25 baseline of the README, re-run as its command is written, within its tolerance."""
    assert main(["--fast", "--out", str(tmp_path)]) == 0
    table = (tmp_path / "reproduce.md").read_text()
    assert "✘" not in table and table.count("✔") == sum(len(c.expected) for c in load_conditions() if c.fast)


YAML = """# a comment that must stay
exact: &exact 0.00005
conditions:
  - name: toy/bm25
    table: toy
    row: BM25
    command: python eval.py --dataset toy --method bm25-flat
    expected: {"ndcg@10": 0.5}
    tolerance: *exact

  - name: toy/model
    table: toy
    row: model  # trained
    command: python eval.py --dataset toy --method augmented
    expected: {"ndcg@10": 0.6, "aug_terms_mean": 2.0}
    tolerance: 0.01
    reported: {latency_ms_p50: 3.0}
"""


def test_record_writes_this_runs_values_and_keeps_the_file_as_it_was_written(tmp_path):
    from bm25aug.reproduce.conditions import record

    path = tmp_path / "r.yaml"
    path.write_text(YAML)
    got = {"toy/bm25": {"ndcg@10": 0.50004}, "toy/model": {"ndcg@10": 0.61234, "aug_terms_mean": 1.5,
                                                            "latency_ms_p50": 2.345, "recall@100": 0.9}}
    assert record(path, load_conditions(path), got) == ["toy/bm25", "toy/model"]
    bm25, model = load_conditions(path)
    assert bm25.expected == {"ndcg@10": 0.5} and model.expected == {"ndcg@10": 0.6123, "aug_terms_mean": 1.5}
    assert model.reported == {"latency_ms_p50": 2.3} and model.tolerance == {"ndcg@10": 0.01, "aug_terms_mean": 0.01}
    text = path.read_text()
    assert text.startswith("# a comment that must stay") and "row: model  # trained" in text


def test_record_refuses_when_an_exact_baseline_moved(tmp_path):
    import pytest

    from bm25aug.errors import UserError
    from bm25aug.reproduce.conditions import record

    path = tmp_path / "r.yaml"
    path.write_text(YAML)
    with pytest.raises(UserError, match="toy/bm25"):
        record(path, load_conditions(path), {"toy/bm25": {"ndcg@10": 0.5002}, "toy/model": {"ndcg@10": 0.7}})
    assert path.read_text() == YAML


def test_the_gpu_run_quoted_in_the_docs_is_the_recorded_one():
    """docs/reproducing.md quotes the one `train.py --device cuda` run against the same command on
    this machine's CPU; both logs are in docs/data/cuda_h200/, and the quoted numbers must be theirs."""
    import json
    import re

    recorded = README.parent / "docs" / "data" / "cuda_h200"
    cuda, cpu = ([json.loads(line)["dev_metric"] for line in (recorded / name).read_text().splitlines()]
                 for name in ("log.jsonl", "cpu_log.jsonl"))
    assert len(cuda) == len(cpu) == 21  # epoch 0 (BM25) and 20 epochs
    assert json.loads((recorded / "config.json").read_text())["device"] == "cuda"
    seconds = re.search(r"best dev ndcg@10: ([0-9.]+) .*\((\d+) s\)", (recorded / "train_stdout.txt").read_text())
    assert seconds and float(seconds[1]) == round(max(cuda), 4)
    text = " ".join((README.parent / "docs" / "reproducing.md").read_text().split())
    assert f"trained the SciFact default in {seconds[2]} s" in text
    assert f"best dev nDCG@10 of {max(cuda):.4f} against {max(cpu):.4f} for the CPU run" in text
    assert max(abs(a - b) for a, b in zip(cuda, cpu)) < 0.005 and "within 0.005 of the CPU run" in text


def test_an_eval_command_runs_in_this_process_from_the_repository_root_and_fails_in_one_line(tmp_path, monkeypatch):
    """A condition's ``python eval.py`` runs eval.py's own entry point here, in the repository root
    whatever the caller's folder (its relative paths are the README's), and its output stays out
    of this run's; a command that fails is one line naming it and its error's last line."""
    import json
    import os

    import pytest

    from bm25aug.errors import UserError
    from bm25aug.reproduce.conditions import ROOT, Condition, run_condition

    seen = []

    def fake_main(argv):
        seen.append((list(argv), os.getcwd()))
        print("a table nobody asked for")
        if "--dataset" in argv and argv[argv.index("--dataset") + 1] == "nowhere":
            import sys

            print("error: no dataset 'nowhere'; fix: pass one of the shared sets", file=sys.stderr)
            return 2
        Path(argv[argv.index("--json-out") + 1]).write_text(json.dumps({"ndcg@10": 0.5}))
        return 0

    monkeypatch.setattr("bm25aug.cli.main", fake_main)
    monkeypatch.chdir(tmp_path)
    fields = {f.name: None for f in dataclasses.fields(Condition)} | {"expected": {}, "tolerance": {}, "fast": True}
    ok = Condition(**{**fields, "name": "x", "command": "python eval.py --dataset scifact --method bm25-flat"})
    assert run_condition(ok) == {"ndcg@10": 0.5}
    assert seen[0][0][:5] == ["eval", "--dataset", "scifact", "--method", "bm25-flat"] and seen[0][1] == str(ROOT)
    assert os.getcwd() == str(tmp_path)  # given back
    bad = Condition(**{**fields, "name": "y", "command": "python eval.py --dataset nowhere"})
    with pytest.raises(UserError) as error:
        run_condition(bad)
    assert str(error.value) == ("`python eval.py --dataset nowhere` failed (error: no dataset 'nowhere'; fix: pass one "
                                "of the shared sets); fix: run it by hand to see why")
