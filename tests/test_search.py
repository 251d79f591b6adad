import json
import subprocess
import sys
from pathlib import Path

import pytest

from bm25aug.errors import UserError
from bm25aug.search.bm25 import BM25Searcher
from bm25aug.search.trec import read_trec_run, write_trec_run

ROOT = Path(__file__).resolve().parents[1]


def test_wp_query_terms_are_counted_wordpieces(tiny_wp):
    _, wp, _ = tiny_wp
    s = BM25Searcher(wp)
    assert s.query_terms("cats cats purred") == {"cats": 2.0, "pu": 1.0, "##rred": 1.0}
    assert s.search("cat on a mat", 3)[0].docid == "d1"


def test_repeated_token_boost_equals_count(tiny_wp):
    _, wp, _ = tiny_wp
    s = BM25Searcher(wp)
    once = {h.docid: h.score for h in s.search_terms({"cat": 1.0}, 5)}
    twice = {h.docid: h.score for h in s.search("cat cat", 5)}
    assert once.keys() == twice.keys()
    assert all(twice[d] == pytest.approx(2 * once[d], rel=1e-6) for d in once)


def test_flat_and_batch_search(tiny_wp):
    _, _, flat = tiny_wp
    s = BM25Searcher(flat)
    assert s.search("barking dogs", 1)[0].docid == "d2"  # stemming: barking -> bark, dogs -> dog
    run = s.batch_search(["pasta", "telescope"], ["a", "b"], k=1, threads=2)
    assert run["a"][0].docid == "d5" and run["b"][0].docid == "d6"


def test_empty_query_has_no_hits(tiny_wp):
    _, wp, flat = tiny_wp
    assert BM25Searcher(wp).search("   ") == [] and BM25Searcher(flat).search("") == []
    assert BM25Searcher(wp).search("\u2603") == []  # only [UNK]


def test_vocab_hash_mismatch_is_an_error(tiny_wp, tmp_path):
    import shutil

    _, wp, _ = tiny_wp
    copy = tmp_path / "idx"
    shutil.copytree(wp, copy)
    meta = json.loads((copy / "meta.json").read_text())
    meta["vocab_hash"] = "deadbeef"
    (copy / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(UserError, match="vocabulary deadbeef"):
        BM25Searcher(copy)


def test_trec_run_round_trip(tiny_wp, tmp_path):
    _, wp, _ = tiny_wp
    run = BM25Searcher(wp).batch_search(["cat", "dog"], ["1", "2"], k=3)
    write_trec_run(run, tmp_path / "run.trec")
    back = read_trec_run(tmp_path / "run.trec")
    assert [h.docid for h in back["1"]] == [h.docid for h in run["1"]]
    assert not list(tmp_path.glob(".run.trec*"))  # no temp file left behind


def test_index_meta_and_atomic_build(tiny_wp):
    ds, wp, _ = tiny_wp
    meta = json.loads((wp / "meta.json").read_text())
    assert meta["flavor"] == "wp" and meta["num_docs"] == 8 and len(meta["vocab_hash"]) == 16
    assert not list(wp.parent.glob(".*building*"))


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, env=env)


@pytest.mark.parametrize("args,message", [
    (["eval.py", "--dataset", "nosuch"], "unknown dataset 'nosuch'"),
    (["eval.py", "--dataset", "scifact", "--method", "augmented", "--checkpoint", "/nonexistent"], "not a bm25aug checkpoint"),
    (["train.py", "--dataset", "nq", "--data-dir", "/nonexistent"], "biencoder-nq-train.json.gz"),
])
def test_cli_errors_are_one_line(args, message, data_dir):
    out = run_cli(*args)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("error: ")


@pytest.mark.parametrize("method", ["bm25-flat", "bm25-wp"])
def test_scifact_run_file_rescoring(method, scifact, tmp_path):
    """A run written by eval.py --output scores the same when read back by eval --run.
    (The values themselves are checked against reproductions.yaml in tests/test_reproduce.py.)"""
    out = run_cli("eval.py", "--dataset", "scifact", "--method", method, "--json-out", str(tmp_path / "m.json"),
                  "--output", str(tmp_path / "run.trec"))
    assert out.returncode == 0, out.stderr
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["num_queries"] == 300 and m["latency_ms_p50"] > 0 and m["qps"] > 0
    rescored = run_cli("-m", "bm25aug.cli", "eval", "--dataset", "scifact", "--run", str(tmp_path / "run.trec"),
                       "--json-out", str(tmp_path / "r.json"))
    assert rescored.returncode == 0, rescored.stderr
    assert json.loads((tmp_path / "r.json").read_text())["ndcg@10"] == pytest.approx(m["ndcg@10"])


def test_augmented_term_lists_leave_out_terms_the_index_lacks(tiny_wp, flat_model):
    """Proposed terms no document has are dropped (they match nothing): the ranking is the
    exported list's, and ``added`` shows only terms that can score."""
    from bm25aug.model.encoder import encode_queries
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher

    _, _, flat = tiny_wp
    searcher = BM25Searcher(flat)
    augmented = AugmentedSearcher(flat_model, searcher)
    query = "big cats and lions"
    exported = encode_queries(flat_model, [query], progress=False)[0]
    terms = augmented.term_list(query)
    lacking = exported.keys() - terms.keys()
    assert lacking and all(searcher.index.doc_freq(t) == 0 for t in lacking)
    assert all(searcher.index.doc_freq(t) > 0 for t in terms)
    assert terms == {t: w for t, w in exported.items() if t not in lacking}
    assert augmented.search(query, 10) == searcher.search_terms(exported, 10)
    assert not lacking & augmented.augment(query).added.keys()


def test_batch_search_on_the_java_pool_equals_one_by_one(tiny_wp, flat_model):
    """Every batch path (flat, wp, weighted term lists, augmented; empty and term-less queries
    among them; more queries than a chunk) returns each query's hits exactly as searching it
    alone does, on 1 and 2 threads; a TREC run written from the arrays equals the ``Hit`` one."""
    from bm25aug.model.encoder import encode_queries
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.batch import CHUNK
    from bm25aug.search.trec import array_lines, trec_lines

    _, wp, flat = tiny_wp
    words = ["cat", "dogs barking", "", "the", "pasta telescope", "cats on a mat", "\u2603", "purred"]
    queries = [words[i % len(words)] + (" cat" * (i % 3)) for i in range(CHUNK + 37)]
    queries[2] = ""
    qids = [f"q{i}" for i in range(len(queries))]
    for index in (flat, wp):
        searcher = BM25Searcher(index)
        alone = [searcher.search(q, 5) for q in queries]
        for threads in (1, 2):
            assert [searcher.hits(t) for t in searcher.batch_search_arrays(queries, 5, threads)] == alone
        assert list(searcher.batch_search(queries, qids, 5).values()) == alone
        tops = searcher.batch_search_arrays(queries, 5)
        assert list(array_lines(qids, tops, searcher.docids)) == list(trec_lines(dict(zip(qids, alone))))
    searcher = BM25Searcher(wp)
    term_lists = [searcher.query_terms(q) | {"mat": 0.5} for q in queries[:50]] + [{}, {"cat": 0.0}]
    assert ([searcher.hits(t) for t in searcher.batch_search_terms_arrays(term_lists, 5, 2)]
            == [searcher.search_terms(t, 5) for t in term_lists])
    augmented = AugmentedSearcher(flat_model, BM25Searcher(flat))
    batched = [augmented.hits(t) for t in augmented.batch_search_arrays(queries, 5, 1)]
    assert [augmented.hits(t) for t in augmented.batch_search_arrays(queries, 5, 2)] == batched
    # Encoded in batches, searched as those term lists are alone (the torch model: no int8 drift).
    lists = augmented.term_lists(queries)
    assert batched == [augmented.bm25.search_terms(t, 5) for t in lists]
    assert lists[2] == {} and batched[2] == []
    exported = encode_queries(flat_model, queries, progress=False)  # what `bm25aug export` writes
    assert [augmented.bm25.indexed(t) for t in exported[3:]] == lists[3:]


def test_a_failing_piece_cancels_every_piece_in_flight():
    """search_chunks hands Java a chunk in pieces; when one piece fails (or a Ctrl-C lands while
    waiting), every piece still in flight is cancelled and the error reaches the caller."""
    from bm25aug.ranking import EMPTY
    from bm25aug.search.batch import CHUNK, PIECE, search_chunks

    class Pending:
        def __init__(self, texts, fail):
            self.texts, self.fail, self.cancelled = texts, fail, False

        def result(self):
            if self.fail:
                raise KeyboardInterrupt
            return [EMPTY] * len(self.texts)

        def cancel(self):
            self.cancelled = True

    class Index:
        def __init__(self):
            self.pieces = []

        def submit(self, kind, texts, k, threads):
            self.pieces.append(Pending(texts, fail=len(self.pieces) == 1))
            return self.pieces[-1]

    index = Index()
    with pytest.raises(KeyboardInterrupt):
        search_chunks(index, "weighted", lambda chunk: chunk, [f"q{i}" for i in range(CHUNK + PIECE)], 10, 2)
    assert len(index.pieces) == CHUNK // PIECE + 1  # the second chunk was submitted before the first was ranked
    # The first piece was ranked, the second raised (a real one cancels its own Java batch), the rest cancelled.
    assert [p.cancelled for p in index.pieces] == [False, False] + [True] * (len(index.pieces) - 2)


def test_a_batch_with_a_query_lucene_refuses_names_it(tiny_wp):
    """A query past Lucene's clause limit, inside a batch on the pool, is the one-line error a
    single search gives, not a Java traceback."""
    _, wp, _ = tiny_wp
    searcher = BM25Searcher(wp)
    too_many = {f"t{i}": 1.0 for i in range(70_000)}
    with pytest.raises(UserError, match="clause limit"):
        searcher.batch_search_terms_arrays([{"cat": 1.0}, too_many], 5, 2)
