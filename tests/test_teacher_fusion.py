"""research/dense_teacher.py's teacher of the general recipe (issue 66, item 1): the fused hybrid's
logits, its sparse side's scores (torch's BM25 of a model's term lists, as Lucene scores them), and
the distillation term in a training run's log."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import write_beir

ROOT = Path(__file__).resolve().parents[1]


def _research():
    spec = importlib.util.spec_from_file_location("dense_teacher", ROOT / "research" / "dense_teacher.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_fused_logits_nest_both_teachers():
    """Weight 0 is the dense teacher's softmax, weight 1 orders as the sparse scores alone, and a
    weight between is the rescaled interpolation of the two min-max normalized rows."""
    teacher = _research()
    cosine = torch.tensor([[0.9, 0.5, 0.7, 0.6], [0.2, 0.4, 0.3, 0.35]])
    sparse = torch.tensor([[1.0, 9.0, 3.0, 3.0], [7.0, 2.0, 4.0, 4.0]])
    dense_only = teacher.fused_logits(cosine, sparse, 0.0, 0.02).softmax(dim=1)
    assert torch.allclose(dense_only, (cosine / 0.02).softmax(dim=1), atol=1e-6)
    sparse_only = teacher.fused_logits(cosine, sparse, 1.0, 0.02)
    assert torch.equal(sparse_only.argsort(dim=1, stable=True), sparse.argsort(dim=1, stable=True))
    mixed = teacher.fused_logits(cosine, sparse, 0.4, 0.05)
    row = cosine[0]
    by_hand = (row.max() - row.min()) * (0.4 * (sparse[0] - 1) / 8 + 0.6 * (row - 0.5) / 0.4) / 0.05
    assert torch.allclose(mixed[0], by_hand, atol=1e-5)
    assert torch.equal(teacher.minmax(torch.tensor([[2.0, 2.0]])), torch.ones(1, 2))  # a constant row


def test_the_sparse_teachers_scores_are_lucenes(tiny_wp, tmp_path, monkeypatch):
    """The term lists of ``general`` on the tiny corpus, scored by ``list_scores`` in torch, give
    every document Lucene's score of the same boosted term query."""
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.train.torch_bm25 import TorchBM25

    teacher = _research()
    monkeypatch.setattr(teacher, "QUERY_CACHE", tmp_path / "cache")
    _, _, flat = tiny_wp
    searcher = AugmentedSearcher.from_pretrained("general", flat)
    queries = ["cat on a mat", "dog barking", "big cats lions", "rain and wind"]
    lists = teacher.term_lists(searcher.encoder, queries)
    assert all(lists) and teacher.term_lists(searcher.encoder, queries) == lists  # the second from the cache
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1
    bm25 = TorchBM25(flat, None)
    rows = list(range(bm25.num_docs))
    scores = teacher.list_scores(bm25, [teacher.column_list(bm25, terms) for terms in lists], rows)
    for i, terms in enumerate(lists):
        top = searcher.bm25.search_terms_arrays(searcher.bm25.indexed(terms), 1000)
        assert len(top.lucene_ids) > 0
        for doc, score in zip(top.lucene_ids.tolist(), top.scores.tolist()):
            assert scores[i, doc].item() == pytest.approx(score, rel=1e-4)  # the bound of test_flat_target.py
        missing = sorted(set(rows) - set(top.lucene_ids.tolist()))
        assert all(scores[i, doc].item() == 0 for doc in missing)  # no term of the list: no score


def test_a_hybrid_teacher_run_logs_its_distillation_term(tmp_path):
    """One epoch of the recipe's training with the fused teacher (bge-small, split precision, with
    ``general``) on the tiny corpus: the distillation term is in the log, and positive."""
    data = tmp_path / "data"
    write_beir(data / "tiny")
    out = tmp_path / "run"
    env = {**os.environ, "BM25AUG_DATA_DIR": str(data)}  # indexes go under the working folder, tmp_path
    done = subprocess.run([sys.executable, str(ROOT / "research" / "dense_teacher.py"), "--dense-model",
                           "bge-small-en-v1.5-int8-corpus", "--dense-temperature", "0.02", "--fuse-with", "general",
                           "--dataset", "tiny", "--epochs", "1", "--threads", "1",
                           "--output-dir", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dense teacher, tiny: cosine to the positive" in done.stderr
    epoch = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()][-1]
    assert epoch["train_distill"] > 0
