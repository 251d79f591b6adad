"""The fast query side (issue 66, item 2): the cached analysis and the term lists give what the
slow path gave, bit for bit; a student model is built, fitted to a teacher's outputs, resumed,
exported and searched like any other model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from bm25aug.errors import UserError
from bm25aug.model.targets import span_mean

ODD = ["U.S.A. e-mail 1,000.5 don't\tcats' O'Neil", "  ", "a  b\n\nc", "x" * 300 + " tail", "ÉCOLE naïve café",
       "🙂 emoji🙂ok", "re-entry, (brackets) [x] {y} <z>", "\x1cfile\x1dsep", "C++ and C# 3.14 v2.0"]


@pytest.mark.realdata
def test_cached_offsets_are_the_analyzers_own(data_dir):
    """Each query twice (the second time from the cache): the terms and offsets of one JVM pass."""
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.analysis import analyze_with_offsets, cached_offsets

    queries = []
    for name in ("scifact", "nfcorpus", "squadshifts-reddit"):
        queries += list(load_dataset(name, data_dir).split("test").queries.values())[:300]
    for _ in range(2):
        assert [cached_offsets(q) for q in queries] == [analyze_with_offsets(q) for q in queries]


def test_cached_offsets_of_odd_texts_are_the_analyzers_own():
    from bm25aug.lucene.analysis import analyze_with_offsets, cached_offsets

    for _ in range(2):
        assert [cached_offsets(q) for q in ODD] == [analyze_with_offsets(q) for q in ODD]


def test_a_new_querys_unseen_words_are_analyzed_in_one_java_call(monkeypatch):
    """Issue 75, item 3: a query's chunks not in the cache are analyzed together (one call, the
    profile's largest cost on a cold query), with the same terms and offsets as alone; the cache
    then answers with no call, and a full cache is emptied first."""
    from bm25aug.lucene import analysis

    monkeypatch.setattr(analysis, "_offset_chunks", {})
    calls = []
    one = analysis.analyze_with_offsets
    monkeypatch.setattr(analysis, "analyze_with_offsets", lambda text: calls.append(text) or one(text))
    text = "dogs' (running) U.S.A. e-mails, 3.14kg dogs' " + "y" * 80 + " don't stop!"
    assert analysis.cached_offsets(text) == one(text)
    assert len(calls) == 1 and calls[0].count(" ") == 7  # the 8 distinct chunks, once each, in one call
    assert set(analysis._offset_chunks) == set(text.split()) - {"y" * 80}  # a long chunk is not kept
    calls.clear()
    assert analysis.cached_offsets("don't stop! dogs'") == one("don't stop! dogs'") and calls == []
    monkeypatch.setattr(analysis, "CHUNK_CACHE", 8)
    assert analysis.cached_offsets("cats run") == one("cats run") and len(calls) == 1
    assert set(analysis._offset_chunks) == {"cats", "run"}


def test_span_mean_is_numpys_mean_bit_for_bit():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        row = (rng.random(20, dtype=np.float32) * rng.choice([1e-3, 1, 7, 1e3])).astype(np.float32)
        span = sorted(rng.choice(20, size=int(rng.integers(1, 13)), replace=False).tolist())
        got, want = span_mean(row, span), row[span].mean(dtype=np.float32)
        assert got.dtype == np.float32 and got.tobytes() == want.tobytes(), (row[span], got, want)


def test_the_output_match_loss_is_zero_at_the_teacher_and_pulls_toward_it():
    from bm25aug.train.losses import OutputMatchLoss

    loss = OutputMatchLoss(floor=1.0, margin=0.1)
    teacher_w = torch.tensor([[2.0, 0.5, 0.0]])
    teacher_a = torch.tensor([[0.0, 0.7, 0.0]])
    real = torch.tensor([[1.0, 1.0, 0.0]])
    # At the teacher: w equal above the floor, anything at or below the floor where the teacher is
    # below it, the padding ignored; a's logits equal where positive, at or below -margin elsewhere.
    at = loss(torch.tensor([[2.0, 0.9, 5.0]]), torch.tensor([[-0.1, 0.7, -3.0]]), teacher_w, teacher_a, real)
    assert float(at["total"]) == 0.0
    w = torch.tensor([[1.5, 1.4, 0.0]], requires_grad=True)
    logits = torch.tensor([[0.05, 0.2, -0.5]], requires_grad=True)
    out = loss(w, logits, teacher_w, teacher_a, real)
    out["total"].backward()
    assert w.grad[0, 0] < 0 and w.grad[0, 1] > 0 and w.grad[0, 2] == 0  # up to 2, down to the floor
    assert logits.grad[0, 0] > 0 and logits.grad[0, 1] < 0 and logits.grad[0, 2] == 0
    assert float(out["w"]) == pytest.approx(0.5 ** 2 + 0.4 ** 2)
    assert float(out["a"]) == pytest.approx(0.15 ** 2 + 0.5 ** 2)


@pytest.fixture(scope="module")
def teacher(flat_model, tmp_path_factory):
    """A flat-target teacher, served as search serves it (its int8 ONNX export)."""
    from bm25aug.model.loading import load_encoder

    path = tmp_path_factory.mktemp("teacher") / "ckpt"
    flat_model.save_pretrained(path)
    return load_encoder(path, "onnx-int8")


def test_a_student_has_the_teachers_settings_on_a_smaller_encoder(teacher):
    from bm25aug.train.student import make_student

    narrow = make_student(teacher.config, 2, 128)
    assert (narrow.encoder.config.num_hidden_layers, narrow.encoder.config.hidden_size) == (2, 128)
    assert {k: v for k, v in vars(narrow.config).items() if k != "encoder"} == \
        {k: v for k, v in vars(teacher.config).items() if k != "encoder"}
    kept = make_student(teacher.config, 2, 384)  # the base's own first two layers
    assert kept.encoder.config.num_hidden_layers == 2
    for layers, hidden, fix in ((2, 100, "multiple of 64"), (0, 128, "--layers 1"), (9, 384, "at most 6"),
                                (2, 512, "at most 384")):
        with pytest.raises(UserError, match=fix):
            make_student(teacher.config, layers, hidden)


class Stopped(Exception):
    """What the stopped run raises after an epoch's last/ is written, as a kill would stop it."""


def test_distillation_fits_the_teacher_resumes_and_serves(teacher, tiny_wp, tmp_path, monkeypatch):
    """A few queries, a few epochs: the held-out loss falls; a run stopped after epoch 2 and
    resumed ends where one uninterrupted run ends; best/ searches alike alone and in batch."""
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.train import distill

    queries = [f"{a} {b} cancer treatment" for a in ("lung", "breast", "skin", "bone", "blood", "brain")
               for b in ("early", "late", "rare", "common", "chronic")]
    config = distill.DistillConfig(layers=1, hidden=64, epochs=4, batch_size=8, lr=3e-3, threads=1)

    def run(out):
        out.mkdir(parents=True, exist_ok=True)
        distill.fit(teacher, queries, config, out, resume=True)
        return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]

    whole = run(tmp_path / "whole")
    assert len(whole) == 4 and whole[-1]["held_out_total"] < whole[0]["held_out_total"]
    save_last = distill._save_last

    def stop_after_two(model, optimizer, schedule, epoch, best, out):
        save_last(model, optimizer, schedule, epoch, best, out)
        if epoch == 2:
            raise Stopped

    monkeypatch.setattr(distill, "_save_last", stop_after_two)
    with pytest.raises(Stopped):
        run(tmp_path / "stopped")
    monkeypatch.setattr(distill, "_save_last", save_last)
    resumed = run(tmp_path / "stopped")  # its teacher outputs from the run folder, epochs 3 and 4 trained
    assert [r["epoch"] for r in resumed] == [1, 2, 3, 4]
    assert [r["held_out_total"] for r in resumed] == pytest.approx([r["held_out_total"] for r in whole], rel=1e-4)
    _, _, flat = tiny_wp
    searcher = AugmentedSearcher.from_pretrained(tmp_path / "whole" / "best", flat)
    probe = queries[:4] + ["rabbits", "lions roar"]
    alone = [searcher.search(q, 5) for q in probe]
    assert [searcher.hits(t) for t in searcher.batch_search_arrays(probe, 5, threads=2)] == alone


def test_a_run_folder_is_continued_only_with_its_own_settings(tmp_path):
    from bm25aug.train import distill

    distill._refuse_other_run(tmp_path, distill.DistillConfig(), resume=False)
    with pytest.raises(UserError, match="pass --resume"):
        distill._refuse_other_run(tmp_path, distill.DistillConfig(), resume=False)
    with pytest.raises(UserError, match="other settings \\(hidden\\)"):
        distill._refuse_other_run(tmp_path, distill.DistillConfig(hidden=192), resume=True)
    with pytest.raises(UserError, match="other settings \\(epochs\\)"):  # the schedule's length: another run
        distill._refuse_other_run(tmp_path, distill.DistillConfig(epochs=30), resume=True)
    distill._refuse_other_run(tmp_path, distill.DistillConfig(threads=1), resume=True)  # where it runs: the same run
    (tmp_path / "distill.json").write_text("{")
    with pytest.raises(UserError, match="unreadable"):
        distill._refuse_other_run(tmp_path, distill.DistillConfig(), resume=True)


def test_a_w_only_student_has_no_augmentation_head_in_its_graph(teacher, tiny_wp, tmp_path):
    """``--aug-weight 0``: the student's a ≡ 0, its a(q) part of the loss is zero, and its served
    ONNX graph holds no head (no weight as wide as the target's live entries); it searches alike
    alone and in batch, and proposes no added term."""
    import onnx

    from bm25aug.lucene.analysis import analyze
    from bm25aug.model.loading import load_encoder
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.train import distill

    queries = [f"{a} {b} disease" for a in ("lung", "skin", "bone", "blood") for b in ("early", "late", "rare")]
    config = distill.DistillConfig(layers=1, hidden=64, epochs=2, batch_size=4, lr=3e-3, threads=1, aug_weight=0.0)
    distill.fit(teacher, queries, config, tmp_path, resume=True)
    rows = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["held_out_a"] for r in rows] == [0.0, 0.0]
    assert [r["held_out_total"] for r in rows] == [r["held_out_w"] for r in rows]
    student = load_encoder(tmp_path / "best", "onnx-int8")
    assert student.config.use_augmentation is False
    live = len(student.target.live)
    graph = onnx.load(str(student.onnx_path))
    assert not [t.name for t in graph.graph.initializer if live in t.dims]
    full = load_encoder(teacher.path, "onnx-int8")  # the teacher's graph has one: the check can fail
    assert [t.name for t in onnx.load(str(full.onnx_path)).graph.initializer if live in t.dims]
    _, _, flat = tiny_wp
    searcher = AugmentedSearcher.from_pretrained(tmp_path / "best", flat)
    probe = queries[:3] + ["rabbits", "lions roar"]
    alone = [searcher.search(q, 5) for q in probe]
    assert [searcher.hits(t) for t in searcher.batch_search_arrays(probe, 5, threads=2)] == alone
    assert all(set(terms) <= set(analyze(q)) for q, terms in zip(probe, student.encode_batch(probe)))


def test_a_student_starts_from_its_teachers_own_weights_read_back_from_its_export(tmp_path, capsys):
    """``--start teacher`` (issue 75, item 2): the packaged ``general``'s weights read back from its
    int8 export are its own (all six layers rebuilt in torch give the served graph's w, within
    int8's rounding of activations, which a base-started model is far from); a student takes the
    teacher's embeddings, its w head and the layers ``--keep`` names, in that order; a shape that
    does not fit the teacher is refused in one line, before the run's folder is made."""
    from bm25aug.model import packaged
    from bm25aug.model.onnx_encoder import OnnxQueryEncoder
    from bm25aug.train import distill
    from bm25aug.train.student import make_student
    from bm25aug.train.teacher_weights import teacher_state

    general = OnnxQueryEncoder.packaged(packaged.PACKAGED_ROOT / "general", "onnx-int8")
    state = teacher_state(general.onnx_path)
    texts = ["vitamin b12 deficiency anemia", "what causes lions to roar", "electric car battery in a garage"]
    batch = general.target.batch(texts)
    served, _ = general.outputs(batch)
    real = batch.attention_mask > 0

    def w_of(model):
        with torch.no_grad():
            return model.eval()(torch.from_numpy(batch.input_ids), torch.from_numpy(batch.attention_mask)
                                ).token_weights.numpy()

    rebuilt = w_of(make_student(general.config, 6, 384, augmentation=False, start=state))
    base = w_of(make_student(general.config, 6, 384, augmentation=False))
    assert np.corrcoef(rebuilt[real], served[real])[0, 1] > 0.99
    assert np.abs(rebuilt - served)[real].mean() < 0.05 < np.abs(base - served)[real].mean()

    student = make_student(general.config, 2, 384, augmentation=False, start=state, keep=[0, 5])
    own = student.state_dict()
    assert student.encoder.config.num_hidden_layers == 2 and student.config.use_augmentation is False
    for name in ("encoder.embeddings.word_embeddings.weight", "weight_head.weight", "weight_head.bias"):
        assert torch.equal(own[name], state[name])
    for mine, theirs in ((0, 0), (1, 5)):
        for part in ("attention.self.query.weight", "intermediate.dense.weight", "output.LayerNorm.bias"):
            assert torch.equal(own[f"encoder.encoder.layer.{mine}.{part}"], state[f"encoder.encoder.layer.{theirs}.{part}"])
    for layers, hidden, keep, fix in ((2, 128, None, "--hidden 384"), (2, 384, [5, 0], "increasing"),
                                      (2, 384, [0, 6], "layers 0-5"), (1, 384, [0, 1], "increasing")):
        with pytest.raises(UserError, match=fix):
            make_student(general.config, layers, hidden, augmentation=False, start=state, keep=keep)
    for flags, fix in ((["--hidden", "128", "--start", "teacher"], "--hidden 384"),
                       (["--keep", "0,5"], "add --start teacher"), (["--start", "Teacher"], "one of base, teacher"),
                       (["--start", "teacher", "--hidden", "384", "--keep", "0,x"], "comma-separated")):
        capsys.readouterr()  # what building the students above printed
        with pytest.raises(SystemExit) as stop:
            distill.main(["--teacher", "general", "--output-dir", str(tmp_path / "run"), *flags])
        error = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and fix in error and len(error.splitlines()) == 1, error
        assert not (tmp_path / "run").exists()
