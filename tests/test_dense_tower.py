"""A dense query tower (issue 76, ``bm25aug.dense.tower``): a folder made from a tower run
(``python -m bm25aug.train.tower_build``) loads wherever a dense model is named, with the corpus
model it was aligned to and no other; its files are checked; batch search equals search; the
hybrid with the tower equals fusing its two lists by hand. The tower here is bge-small's first
layer, untrained: these tests are about the plumbing, not the quality."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bm25aug.errors import UserError
from test_hybrid import DEPTH, K, QUERIES, by_hand, corpus  # noqa: F401 (the module's fixture)

INT8 = "bge-small-en-v1.5-int8"


@pytest.fixture(scope="module")
def tower(tmp_path_factory):
    """A tower folder built from a run of bge's layer 0 (no training step)."""
    import shutil

    from bm25aug.train.tower_build import build
    from bm25aug.train.tower import RECORD, export_onnx
    from bm25aug.train.tower_weights import bge_onnx_path, make_student, teacher_bert

    root = tmp_path_factory.mktemp("tower")
    run = root / "run"
    run.mkdir()
    assert export_onnx(make_student(teacher_bert(), [0]), run / "model.onnx") < 1e-3  # dropout 0.1: eval mode
    shutil.copyfile(bge_onnx_path().parent / "tokenizer.json", run / "tokenizer.json")
    (run / RECORD).write_text(json.dumps({"command": "python -m bm25aug.train.tower --keep 0", "kept_layers": [0],
                                          "texts": 0}))
    return build(run, root / "bge-tower-l0", "bge-tower-l0", INT8)


def one_line(error) -> str:
    text = str(error.value)
    assert "\n" not in text and "fix:" in text, text
    return text


def test_a_tower_loads_with_the_corpus_model_it_was_aligned_to(tower):
    from bm25aug.dense import load_dense_model
    from bm25aug.dense.tower import QueryTower

    model = load_dense_model(str(tower))
    assert isinstance(model, QueryTower) and model.name == "bge-tower-l0"
    int8 = load_dense_model(INT8)
    assert model.corpus_encoder.name == INT8 and model.corpus_encoder.digest == int8.digest
    texts = ["big cats lions", "heart disease"]
    vectors = model.encode_queries(texts)
    assert vectors.shape == (2, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    bge = load_dense_model("bge-small-en-v1.5")
    assert not np.allclose(vectors, bge.encode_queries(texts), atol=1e-3)  # the tower's own vectors, not bge's
    assert np.allclose(model.encode_documents(texts), int8.encode_documents(texts))  # documents: the corpus model's
    card = (tower / "README.md").read_text()
    assert "MIT" in card and INT8 in card


def test_another_corpus_model_is_refused_in_one_line(tower, tmp_path):
    import shutil

    from bm25aug.dense import load_dense_model
    from bm25aug.dense.record import RECORD, folder_record
    from bm25aug.dense.tower import QueryTower
    from bm25aug.train.tower_build import build

    model = load_dense_model(str(tower))
    with pytest.raises(UserError) as error:
        QueryTower("mixed", model.queries, load_dense_model("bge-small-en-v1.5-fp32"), folder_record(tower))
    assert "aligned to bge-small-en-v1.5-int8" in one_line(error)
    copy = tmp_path / "copy"
    shutil.copytree(tower, copy)
    record = json.loads((copy / RECORD).read_text())
    (copy / RECORD).write_text(json.dumps({**record, "corpus_model": "all-MiniLM-L6-v2"}))
    with pytest.raises(UserError) as error:
        load_dense_model(str(copy))
    assert "no pinned dense model" in one_line(error)
    (copy / RECORD).write_text(json.dumps({**record, "corpus_digest": "0" * 32}))
    with pytest.raises(UserError) as error:
        load_dense_model(str(copy))
    assert "aligned to" in one_line(error)
    with pytest.raises(UserError) as error:
        build(tower, tmp_path / "other", "x", "all-MiniLM-L6-v2")  # not a run: refused before anything
    assert "no finished tower run" in one_line(error)


def test_a_changed_or_missing_tower_file_is_refused_in_one_line(tower, tmp_path):
    import shutil

    from bm25aug.dense import load_dense_model

    copy = tmp_path / "copy"
    shutil.copytree(tower, copy)
    data = bytearray((copy / "model.onnx").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (copy / "model.onnx").write_bytes(bytes(data))
    with pytest.raises(UserError) as error:
        load_dense_model(str(copy))
    assert "does not match the checksum" in one_line(error)
    (copy / "model.onnx").unlink()
    with pytest.raises(UserError) as error:
        load_dense_model(str(copy))
    assert "query tower" in one_line(error)


def test_batch_search_equals_search_and_the_hybrid_equals_fusing_by_hand(tower, corpus):  # noqa: F811
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.dense import DenseSearcher
    from bm25aug.search.hybrid import Fusion, HybridSearcher

    _, flat = corpus
    sparse = AugmentedSearcher.from_pretrained("general", flat)
    dense = DenseSearcher(sparse.bm25.index, str(tower))
    texts, qids = list(QUERIES.values()), list(QUERIES)
    alone = {q: dense.search(t, DEPTH) for q, t in QUERIES.items()}
    for threads in (1, 2):
        batch = dense.batch_search(texts, qids, k=DEPTH, threads=threads)
        assert {q: [(h.docid, h.score) for h in hits] for q, hits in batch.items()} == \
            {q: [(h.docid, h.score) for h in hits] for q, hits in alone.items()}
    hybrid = HybridSearcher(sparse, dense, Fusion("interpolation", 0.4, DEPTH))
    for q, t in QUERIES.items():
        want = by_hand(sparse.search(t, DEPTH), alone[q], "interpolation", 0.4, DEPTH, K)
        assert [(h.docid, h.score) for h in hybrid.search(t, K)] == want
