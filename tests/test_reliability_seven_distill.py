"""Reliability, round seven (issue 74; ``../shared/notes/probe-round7.md``, "Distillation"):
``python -m bm25aug.train.distill`` refuses a setting out of its range at once, before the
teacher's pass and before its run folder is made (DI3 to DI7, DI9, DI10), and a ``--resume``
over a damaged ``last/`` is one line (DI17)."""

from __future__ import annotations

import shutil

import pytest

from bm25aug.errors import UserError

# Each used to be taken: the run went on to the teacher's pass (and wrote its folder), then saved
# no model (epochs), an untrained one (batch size -5, learning rate 0), NaN weights (margin, a(q)
# weight), or ended in a traceback (batch size 0, learning rate nan and -1, threads 0).
BAD = [("--epochs", "0"), ("--epochs", "-1"), ("--batch-size", "0"), ("--batch-size", "-5"), ("--lr", "nan"),
       ("--lr", "-1"), ("--lr", "0"), ("--threads", "0"), ("--margin", "nan"), ("--aug-weight", "nan"),
       ("--aug-weight", "inf"), ("--pseudo-queries", "-1")]


@pytest.mark.parametrize("flag,value", BAD)
def test_a_setting_out_of_range_is_refused_before_any_work(flag, value, tmp_path, capsys):
    """DI3-DI7, DI9, DI10: rc 2, one line naming the flag, and no run folder. The recipe trains on
    nothing, so a setting let through ends at that error instead, after the folder is made."""
    from bm25aug.train import distill

    out = tmp_path / "run"
    options = {"--recipe": "scifact", "--threads": "1", "--output-dir": str(out), flag: value}
    with pytest.raises(SystemExit) as stop:
        distill.main([part for pair in options.items() for part in pair])
    err = capsys.readouterr().err
    assert stop.value.code == 2
    assert err.startswith(f"error: {flag} ") and err.count("\n") == 1 and "; fix: " in err, err
    assert not out.exists()


def test_the_edges_of_each_range_are_taken():
    """0 is a count, a margin and an a(q) weight (a w-only student) the run takes; so are the defaults."""
    from bm25aug.train.distill import DistillConfig, check_settings

    check_settings(DistillConfig())
    check_settings(DistillConfig(pseudo_queries=0, margin=0.0, aug_weight=0.0, epochs=1, batch_size=1, threads=1,
                                 lr=1.0))


@pytest.fixture(scope="module")
def ended_run(flat_model, tmp_path_factory):
    """A one-epoch run of a tiny student, fitted to a flat-target teacher on a dozen queries."""
    from bm25aug.model.loading import load_encoder
    from bm25aug.train import distill

    root = tmp_path_factory.mktemp("distilled")
    flat_model.save_pretrained(root / "teacher")
    teacher = load_encoder(root / "teacher", "onnx-int8")
    queries = [f"{a} {b} disease" for a in ("lung", "skin", "bone", "blood") for b in ("early", "late", "rare")]
    config = distill.DistillConfig(layers=1, hidden=64, epochs=1, batch_size=4, threads=1, aug_weight=0.0)
    (root / "run").mkdir()
    distill.fit(teacher, queries, config, root / "run", resume=True)
    return teacher, queries, config, root / "run"


def _random_bytes(path):
    path.write_bytes(bytes(range(7, 107)))


def _truncated(path):
    path.write_bytes(path.read_bytes()[:1000])


@pytest.mark.parametrize("name,damage", [("distill_state.pt", _random_bytes), ("model.safetensors", _truncated)])
def test_a_resume_over_a_damaged_last_is_one_line(ended_run, tmp_path, name, damage):
    """DI17: 100 bytes of noise in the state (torch's unpickler: IndexError) or a truncated model
    (SafetensorError) used to be a traceback; now one line, and the folder is left as it was."""
    from bm25aug.train import distill

    teacher, queries, config, run = ended_run
    out = tmp_path / "run"
    shutil.copytree(run, out)
    damage(out / "last" / name)
    before = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    with pytest.raises(UserError, match="is damaged .*; fix: start the run again without --resume") as e:
        distill.fit(teacher, queries, config, out, resume=True)
    assert "\n" not in str(e.value) and str(out / "last") in str(e.value)
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before
