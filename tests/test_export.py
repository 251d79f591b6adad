"""The paper's promise: exported term lists searched by plain Pyserini rank as AugmentedSearcher does."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def plain_pyserini_search(index_dir, vector: dict[str, float], k: int):
    """Only Pyserini and Lucene classes: boosted TermQuery clauses, no bm25aug code."""
    from jnius import autoclass
    from pyserini.search.lucene import LuceneSearcher, querybuilder

    searcher = LuceneSearcher(str(index_dir))
    searcher.set_bm25(0.9, 0.4)
    builder = querybuilder.get_boolean_query_builder()
    term, term_query = autoclass("org.apache.lucene.index.Term"), autoclass("org.apache.lucene.search.TermQuery")
    for token, weight in vector.items():
        builder.add(querybuilder.get_boost_query(term_query(term("contents", token)), weight),
                    querybuilder.JBooleanClauseOccur["should"].value)
    return [(h.docid, h.score) for h in searcher.search(builder.build(), k)]


def check_export_parity(model, index, tmp_path) -> None:
    """Export SciFact test with the CLI, then search 25 exported term lists with plain Pyserini."""
    from bm25aug.search.augmented import AugmentedSearcher

    ckpt = tmp_path / "ckpt"
    model.save_pretrained(ckpt)
    out = tmp_path / "q.jsonl"
    proc = subprocess.run([sys.executable, "-m", "bm25aug.cli", "export", "--checkpoint", str(ckpt), "--dataset",
                           "scifact", "--split", "test", "--output", str(out), "--top-k", "64"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # The first export of a checkpoint builds its ONNX encoder; the quantizer's per-tensor INFO lines
    # (on the root logger) must not reach the user.
    assert "Quantization parameters" not in proc.stderr and "get_tensor_type" not in proc.stderr, proc.stderr[-500:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 300 and all(set(r) == {"id", "text", "vector"} for r in rows)
    searcher = AugmentedSearcher.from_pretrained(ckpt, index, top_k=64)
    for row in rows[:25]:
        ours = [(h.docid, h.score) for h in searcher.search(row["text"], 100)]
        assert plain_pyserini_search(index, row["vector"], 100) == ours
    shown = searcher.augment(rows[0]["text"])
    assert set(shown.reweighted) == set(searcher.bm25.query_terms(rows[0]["text"]))
    assert all(t not in shown.reweighted for t in shown.added)
    assert searcher.search("") == [] and isinstance(searcher.search("\u2603 \u2603"), list)


def test_exported_terms_rank_like_augmented_searcher(scifact_wp, offline_model, tmp_path):
    check_export_parity(offline_model, scifact_wp, tmp_path)


def test_exported_flat_terms_rank_like_augmented_searcher(scifact_flat, flat_model, tmp_path):
    """Flat target: the export holds analyzed (stemmed) terms, searched without re-analysis."""
    check_export_parity(flat_model, scifact_flat, tmp_path)


def test_checkpoint_vocab_mismatch(scifact_wp, offline_model, tmp_path):
    import pytest

    from bm25aug.errors import UserError
    from bm25aug.search.augmented import AugmentedSearcher

    offline_model.config.vocab_hash, saved = "0000", offline_model.config.vocab_hash
    try:
        offline_model.save_pretrained(tmp_path / "bad")
    finally:
        offline_model.config.vocab_hash = saved
    with pytest.raises(UserError, match="trained against vocabulary 0000"):
        AugmentedSearcher.from_pretrained(tmp_path / "bad", scifact_wp)


def test_explain_tells_a_term_the_index_lacks_from_one_the_model_dropped(scifact_flat, flat_model):
    """'pba' (of '4-PBA') is in no SciFact document: its boost is never searched, and explain
    says so instead of showing a learned 0 as if the model had dropped it."""
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher

    shown = AugmentedSearcher(flat_model, BM25Searcher(scifact_flat)).augment("4-PBA treatment of cells")
    assert shown.unindexed == {"pba"} and "pba" in shown.original and "pba" not in shown.terms
    line = next(line for line in shown.explain().splitlines() if line.strip().startswith("pba"))
    assert "in no document of the index" in line
