"""The dense query tower (issue 76): bge-small read back from its ONNX export, a tower cut from it,
its --keep refused in one line when it names no layers of bge, and one training step."""

import numpy as np
import pytest
import torch

from bm25aug.train.tower import main, mean_loss, optimizer_for, TowerConfig, token_rows, train_step
from bm25aug.train.tower_weights import cls_vectors, make_student, padded, parse_keep, teacher_bert

TEXTS = ["what is vitamin B12 deficiency", "Who founded the city of Rome, and when was it founded by legend?",
         "symptoms of flu", "how do i reset my router", "ALDH1 expression and breast cancer prognosis",
         "best budget headphones for running", "when did the Normans invade England", "is coffee bad for the heart"]


@pytest.fixture(scope="module")
def teacher():
    torch.manual_seed(0)
    return teacher_bert()


def test_the_read_back_bert_gives_bges_onnx_vectors(teacher):
    from bm25aug.dense.loading import load_dense_model

    bge = load_dense_model("bge-small-en-v1.5-fp32", threads=1)
    texts = TEXTS[:2]
    want = bge.encode_queries(texts)  # the instruction prepended, onnxruntime
    ids, mask = padded(token_rows(texts))
    with torch.no_grad():
        got = cls_vectors(teacher, ids, mask).numpy()
    assert np.abs(got - want).max() < 1e-4
    assert float((got * want).sum(1).min()) > 0.9999


def test_a_student_keeps_the_teachers_own_tensors(teacher):
    student = make_student(teacher, [0, 2])
    assert student.config.num_hidden_layers == 2 and len(student.encoder.layer) == 2
    theirs, ours = teacher.state_dict(), student.state_dict()
    for name, value in ours.items():
        source = name.replace("encoder.layer.1.", "encoder.layer.2.")
        assert torch.equal(value, theirs[source]), name
    assert any(k.startswith("encoder.layer.0.") for k in ours) and any(k.startswith("encoder.layer.1.") for k in ours)
    with torch.no_grad():  # copies: training the student leaves the teacher as it is
        student.encoder.layer[1].output.dense.bias.add_(1.0)
    assert not torch.equal(student.encoder.layer[1].output.dense.bias, teacher.encoder.layer[2].output.dense.bias)


@pytest.mark.parametrize("keep,says", [("0,12", "no layer 12"), ("1,1", "twice"), ("5,0", "not ascending"),
                                       ("0,x", "not a list"), ("-1", "no layer -1")])
def test_a_bad_keep_is_one_line(keep, says, tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_:
        main(["--keep", keep, "--output-dir", str(out)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and says in err and "fix:" in err
    assert not out.exists()  # refused before any work


def test_parse_keep_takes_layers_in_order():
    assert parse_keep("0,5,11") == [0, 5, 11] and parse_keep([0, 1]) == [0, 1]


def test_one_training_step_lowers_the_loss(teacher):
    torch.manual_seed(13)
    rows = token_rows(TEXTS)
    ids, mask = padded(rows)
    with torch.no_grad():
        targets = cls_vectors(teacher, ids, mask).numpy()
    student = make_student(teacher, [0], dropout=0.0)
    before = mean_loss(student, rows, targets)
    optimizer, schedule = optimizer_for(student, TowerConfig(lr=1e-4, warmup=0.0), steps=10)
    train_step(student, optimizer, rows, torch.from_numpy(targets), schedule)
    after = mean_loss(student, rows, targets)
    assert 0 < after < before


@pytest.mark.realdata
def test_training_texts_hold_no_dev_or_test_query(data_dir):
    from bm25aug.train.tower import barred_texts, training_texts

    texts = training_texts(str(data_dir), pseudo=0)
    barred = barred_texts(str(data_dir))
    assert len(texts) > 30000 and len(barred) > 10000
    assert not {t.strip() for t in texts} & barred


def test_the_teacher_vectors_cache_remakes_a_damaged_file_and_stays_bounded(tmp_path):
    """bge's vectors are made once per text list, made again when their file is damaged, and the
    cache keeps its ``TEACHER_FILES`` most recently used files (nothing else in the folder goes)."""
    from bm25aug.train import tower

    class Model:
        name, digest, dim, calls = "fake", "f" * 32, 4, 0

        def encode_queries(self, texts):
            Model.calls += 1
            return np.ones((len(texts), 4), np.float32)

    model, other = Model(), tmp_path / "notes.txt"
    other.write_text("not the cache's")
    first = tower.teacher_vectors(["a", "b"], root=tmp_path, model=model)
    assert first.shape == (2, 4) and Model.calls == 1
    assert tower.teacher_vectors(["a", "b"], root=tmp_path, model=model).shape == (2, 4) and Model.calls == 1
    (npy,) = tmp_path.glob("*.npy")
    npy.write_bytes(b"damaged")
    assert tower.teacher_vectors(["a", "b"], root=tmp_path, model=model).shape == (2, 4) and Model.calls == 2
    for i in range(tower.TEACHER_FILES):
        tower.teacher_vectors([f"t{i}"], root=tmp_path, model=model)
    assert len([f for f in tmp_path.iterdir() if f.suffix in (".npy", ".json")]) == tower.TEACHER_FILES
    assert other.read_text() == "not the cache's"
