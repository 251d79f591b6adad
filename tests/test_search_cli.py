"""``bm25aug search``: one query printed, a query file to a TREC run, on a bm25aug index, a stock
Pyserini index and a Pyserini prebuilt index name (placed where Pyserini caches it: offline)."""

import json
import shutil

import pytest

from bm25aug.cli import main
from bm25aug.search.augmented import AugmentedSearcher
from bm25aug.search.bm25 import BM25Searcher
from bm25aug.search.trec import read_trec_run
from test_stock_index import pyserini_index

QUERIES = {"q1": "cat on a mat", "q2": "dog barking", "q3": "big cats lions"}


def test_one_query_prints_the_searchers_hits(tiny_wp, capsys):
    _, _, flat = tiny_wp
    assert main(["search", "--index", str(flat), "--query", "big cats lions", "--k", "3"]) == 0
    printed = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert [(r[1], float(r[2])) for r in printed] == [(h.docid, round(h.score, 5)) for h in
                                                    BM25Searcher(flat).search("big cats lions", 3)]


@pytest.mark.parametrize("suffix", [".tsv", ".jsonl"])
def test_a_query_file_becomes_the_run_of_batch_search(tiny_wp, tmp_path, suffix, flat_model):
    _, wp, flat = tiny_wp
    queries = tmp_path / f"queries{suffix}"
    queries.write_text("".join(f"{q}\t{t}\n" if suffix == ".tsv" else json.dumps({"_id": q, "text": t}) + "\n"
                               for q, t in QUERIES.items()))
    flat_model.save_pretrained(tmp_path / "model")
    stock = pyserini_index(tmp_path / "stock.flat")
    for index, model, searcher in ((wp, None, BM25Searcher(wp)), (stock, None, BM25Searcher(stock)),
                                   (flat, tmp_path / "model", AugmentedSearcher.from_pretrained(tmp_path / "model", flat))):
        out = tmp_path / "run.trec"
        args = ["search", "--index", str(index), "--queries", str(queries), "--output", str(out), "--k", "5"]
        assert main(args + (["--model", str(model)] if model else [])) == 0
        expected = searcher.batch_search(list(QUERIES.values()), list(QUERIES), k=5)
        assert {q: [h.docid for h in hits] for q, hits in read_trec_run(out).items()} == \
            {q: [h.docid for h in hits] for q, hits in expected.items()}


def test_a_prebuilt_index_name_is_found_in_pyserinis_cache(tmp_path, monkeypatch, capsys):
    from bm25aug.lucene.jvm import start_jvm

    start_jvm()
    from pyserini.prebuilt_index_info import TF_INDEX_INFO

    info = TF_INDEX_INFO["beir-v1.0.0-scifact.flat"]
    name = info["filename"].removesuffix(".tar.gz")
    placed = tmp_path / "cache" / "indexes" / f"{name}.{info['md5']}"
    shutil.copytree(pyserini_index(tmp_path / "stock.flat"), placed)  # as if downloaded earlier
    monkeypatch.setenv("PYSERINI_CACHE", str(tmp_path / "cache"))
    assert main(["search", "--index", "beir-v1.0.0-scifact.flat", "--query", "cat on a mat", "--k", "2"]) == 0
    assert capsys.readouterr().out.split()[1] == BM25Searcher(placed).search("cat on a mat", 1)[0].docid
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\tcat\n")
    assert main(["search", "--index", "beir-v1.0.0-scifact.flat", "--queries", str(queries), "--output",
                 str(placed / "segments_9")]) == 2
    assert "lies inside --index" in capsys.readouterr().err and not (placed / "segments_9").exists()


def test_search_refuses_to_write_over_its_queries(tiny_wp, tmp_path, capsys):
    _, _, flat = tiny_wp
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\tcat\n")
    assert main(["search", "--index", str(flat), "--queries", str(queries), "--output", str(queries)]) == 2
    assert "is --queries" in capsys.readouterr().err and queries.read_text() == "q1\tcat\n"
    queries.write_text("no tab here\n")
    assert main(["search", "--index", str(flat), "--queries", str(queries)]) == 2
    assert "expected 'qid<TAB>query text'" in capsys.readouterr().err
    for line in ("a b\tcat\n", "\tcat\n"):
        queries.write_text(line)
        assert main(["search", "--index", str(flat), "--queries", str(queries)]) == 2
        assert "is empty, holds whitespace" in capsys.readouterr().err
    assert main(["search", "--index", str(flat), "--query", "cat", "--output", str(tmp_path / "x.trec")]) == 2
    assert "--output writes the run of --queries" in capsys.readouterr().err


def test_exported_term_lists_searched_with_terms_rank_as_the_model(tiny_wp, tmp_path, flat_model, capsys):
    """``bm25aug export`` then ``bm25aug search --terms``: the model's own hits, without the model."""
    ds, _, flat = tiny_wp
    flat_model.save_pretrained(tmp_path / "model")
    queries = ds.split("test").queries
    assert main(["export", "--checkpoint", str(tmp_path / "model"), "--dataset", str(ds.path), "--split", "test",
                 "--output", str(tmp_path / "q.jsonl"), "--index-root", str(flat.parent)]) == 0
    assert main(["search", "--index", str(flat), "--terms", str(tmp_path / "q.jsonl"), "--k", "5",
                 "--output", str(tmp_path / "run.trec"), "--threads", "2"]) == 0
    run = read_trec_run(tmp_path / "run.trec")
    searcher = AugmentedSearcher.from_pretrained(tmp_path / "model", flat)
    for qid, q in queries.items():
        assert [(h.docid, round(h.score, 4)) for h in run[qid]] == \
            [(h.docid, round(h.score, 4)) for h in searcher.search(q, k=5)]


def test_a_term_list_export_left_empty_is_a_query_without_hits(tiny_wp, tmp_path, capsys):
    """export writes ``"vector": {}`` for a query with no terms; search --terms gives it no hits, the others theirs."""
    ds, _, flat = tiny_wp
    (tmp_path / "t.jsonl").write_text('{"id": "q0", "vector": {}}\n{"id": "q1", "vector": {"cat": 2.0}}\n')
    assert main(["search", "--index", str(flat), "--terms", str(tmp_path / "t.jsonl"), "--k", "3",
                 "--output", str(tmp_path / "run.trec")]) == 0
    run = read_trec_run(tmp_path / "run.trec")
    assert "q0" not in run and run["q1"]
    (tmp_path / "empty.jsonl").write_text('{"id": "q0", "vector": {}}\n')
    assert main(["search", "--index", str(flat), "--terms", str(tmp_path / "empty.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no term to search" in err, err


@pytest.mark.parametrize("line, says", [
    ('{"id": "q1", "vector": []}', "expected"),
    ('{"id": "q1", "vector": {"cat": -1}}', "the weight of 'cat'"),
    ('{"id": "q1", "vector": {"cat": NaN}}', "the weight of 'cat'"),
    ('{"id": "q1", "vector": {"cat": 3.4e38}}', "over 1e+06"),
    ('{"id": "q1", "vector": {"two words": 1}}', "whitespace"),
    ('{"id": "q 1", "vector": {"cat": 1}}', "holds whitespace"),
    ('{"vector": {"cat": 1}}', "expected"),
    ('not json', "malformed JSON"),
])
def test_bad_term_lists_are_one_line_errors(tiny_wp, tmp_path, capsys, line, says):
    _, _, flat = tiny_wp
    (tmp_path / "t.jsonl").write_text(line + "\n")
    assert main(["search", "--index", str(flat), "--terms", str(tmp_path / "t.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "t.jsonl:1" in err, err
