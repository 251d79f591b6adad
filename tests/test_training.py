"""Training end to end on a tiny corpus: runs, logs, checkpoints atomically, resumes."""

import json

import pytest

from bm25aug.errors import UserError
from bm25aug.training import TrainConfig, Trainer


def tiny_config(out, **kw):
    settings = dict(epochs=1, batch_size=4, dev_size=2, negative_depth=3, threads=1, target="wp") | kw
    return TrainConfig(dataset="tiny", output_dir=str(out), **settings)


def test_train_then_resume(tiny_wp, tmp_path):
    ds, wp, _ = tiny_wp
    out = tmp_path / "run"
    result = Trainer(tiny_config(out), ds, wp).train()
    assert (out / "best" / "model.safetensors").exists() and (out / "last" / "trainer_state.pt").exists()
    assert (out / "curves.png").stat().st_size > 1000
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [0, 1] and "train_rank" in log[1]
    assert json.loads((out / "dev_split.json").read_text())["how"].startswith("seeded slice of train")
    assert result["best_dev_metric"] >= 0
    with pytest.raises(UserError, match="--resume"):
        Trainer(tiny_config(out), ds, wp)
    resumed = Trainer(tiny_config(out, epochs=2), ds, wp, resume=True).train()
    assert [r["epoch"] for r in resumed["history"]] == [0, 1, 2]  # continued, not restarted
    with pytest.raises(UserError, match="differ from the saved run"):
        Trainer(tiny_config(out, lam=0.5), ds, wp, resume=True)


def test_flat_target_trains_calibrates_its_gate_and_old_runs_resume(tiny_wp, tmp_path):
    """The default target (flat) trains on a flat index; after training, best/ carries the gate;
    a run saved before targets existed resumes as the wp run it was."""
    from bm25aug.model import QueryAugmenter

    ds, wp, flat = tiny_wp
    out = tmp_path / "flat"
    Trainer(tiny_config(out, target="flat", weight_floor=1.0), ds, flat).train()
    best = QueryAugmenter.from_pretrained(out / "best")
    assert best.config.target == "flat" and best.config.weight_floor == 1.0 and best.config.aug_gate >= 1
    with pytest.raises(UserError, match="flat index"):
        Trainer(tiny_config(tmp_path / "mismatch", target="flat"), ds, wp)
    legacy = tmp_path / "legacy"
    Trainer(tiny_config(legacy, weight_floor=0.0), ds, wp).train()
    saved = json.loads((legacy / "config.json").read_text())
    for key in ("target", "weight_floor", "gate_quantile", "pooling", "penalty_floor"):
        saved.pop(key)
    (legacy / "config.json").write_text(json.dumps(saved))
    Trainer(tiny_config(legacy, weight_floor=0.0, epochs=2), ds, wp, resume=True).train()
    with pytest.raises(UserError, match="target"):
        Trainer(tiny_config(legacy, target="flat", weight_floor=0.0, epochs=2), ds, flat, resume=True)


@pytest.mark.parametrize("flags", [dict(uniform_l1=True), dict(use_weights=False), dict(bag_of_words=True),
                                   dict(use_augmentation=False)])
def test_ablations_train(tiny_wp, tmp_path, flags):
    ds, wp, _ = tiny_wp
    result = Trainer(tiny_config(tmp_path / "r", **flags), ds, wp).train()
    assert len(result["history"]) == 2


def test_presets_follow_the_paper():
    nq = TrainConfig.for_dataset("nq")
    assert (nq.lr, nq.batch_size, nq.lam, nq.epochs, nq.hard_negatives) == (3e-4, 144, 0.1, 45, 1)
    mm = TrainConfig.for_dataset("msmarco", epochs=1)
    assert (mm.lr, mm.lam, mm.hard_negatives, mm.epochs) == (3e-5, 0.025, 4, 1)
    # SciFact differs from the other small sets only in its epochs; an override still wins.
    scifact, nfcorpus = TrainConfig.for_dataset("scifact"), TrainConfig.for_dataset("nfcorpus")
    assert (scifact.epochs, nfcorpus.epochs, TrainConfig.for_dataset("scifact", epochs=6).epochs) == (20, 6, 6)
    assert {**vars(scifact), "epochs": 6, "dataset": "nfcorpus"} == vars(nfcorpus)


@pytest.mark.parametrize("bad", [dict(gate_quantile=1.5), dict(pseudo_queries=-1), dict(aug_threshold=-0.1),
                                 dict(negatives="mined")])
def test_bad_settings_fail_before_anything_is_written(tiny_wp, tmp_path, bad):
    ds, wp, _ = tiny_wp
    with pytest.raises(UserError, match="fix:"):
        Trainer(tiny_config(tmp_path / "bad", **bad), ds, wp)
    assert not (tmp_path / "bad").exists()
