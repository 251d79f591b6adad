"""Hybrid search (``bm25aug.search.hybrid``): the packaged ``general`` (or bm25-flat) fused with a
dense model equals fusing the two runs by hand, through the Python API, ``bm25aug search``,
``eval.py`` and the REST server, for both fusions; the fusion rules by their formulas; bad
settings one line.

The corpus is 240 generated documents over a small vocabulary (so that BM25 has ties, and the
fusion depth cuts lists that the other side reaches past), the dense side all-MiniLM-L6-v2 (a pip
dependency: nothing to fetch), the depth 20, so that each side's list is cut."""

from __future__ import annotations

import json
import random

import httpx
import numpy as np
import pytest

from bm25aug.cli import main
from bm25aug.errors import UserError
from bm25aug.ranking import TopK
from bm25aug.search.trec import read_trec_run
from conftest import write_beir
from test_serve import Server

DENSE, DEPTH, K = "all-MiniLM-L6-v2", 20, 10
WORDS = ("cat dog lion tiger mouse horse river mountain forest rain wind snow storm heart blood cancer cell gene "
         "protein virus vaccine drug trial patient doctor school teacher student music song guitar piano paint "
         "museum history war king queen castle ship ocean island fish bird tree flower garden bread cheese wine "
         "coffee market price bank money city street car train engine").split()
QUERIES = {f"q{i}": text for i, text in enumerate([
    "big cats lions and tigers", "heart disease in patients", "vaccine trial for a virus", "music with piano and song",
    "storm over the ocean", "the king and queen in the castle", "bread cheese and wine", "price of money in a bank",
    "train engine in the city", "garden flower and tree", "cancer cell gene", "a fish and a bird"])}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The generated dataset and its flat index."""
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index

    rng, docs = random.Random(7), {}
    while len(docs) < 240:
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))
        if text not in {t for _, t in docs.values()}:
            docs[f"d{len(docs):03d}"] = (" ".join(rng.sample(WORDS, 2)), text)
    root = tmp_path_factory.mktemp("hybrid")
    ds = load_dataset(str(write_beir(root / "gen", docs=docs, queries=QUERIES, splits=("test",))))
    return ds, ensure_index(ds, "flat", root / "indexes")


def by_hand(sparse: list, dense: list, method: str, weight: float, depth: int, k: int) -> list[tuple[str, float]]:
    """Two runs' hits (docid, score) fused as the docs say, in plain Python."""
    def side(hits):
        hits = hits[:depth]
        if method == "rrf":
            return {h.docid: 1.0 / (60 + rank) for rank, h in enumerate(hits, 1)}
        low, high = min(float(h.score) for h in hits), max(float(h.score) for h in hits)
        return {h.docid: 1.0 if high == low else (float(h.score) - low) / (high - low) for h in hits}

    shares = (1.0, 1.0) if method == "rrf" else (weight, 1.0 - weight)
    total: dict[str, float] = {}
    for share, hits in zip(shares, (sparse, dense)):
        for docid, value in side(hits).items():
            total[docid] = total.get(docid, 0.0) + share * value
    return sorted(total.items(), key=lambda item: (-item[1], item[0]))[:k]


@pytest.fixture(scope="module", params=["rrf", "interpolation"])
def expected(request, corpus):
    """The fusion asked for, and each query's hits fused by hand from the two searchers' own runs:
    searched one query at a time, and as one batch (whose dense query vectors differ from a lone
    query's by float rounding, as a batched encoder's do)."""
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.dense import DenseSearcher

    _, flat = corpus
    sparse = AugmentedSearcher.from_pretrained("general", flat)
    dense = DenseSearcher(sparse.bm25.index, DENSE)
    alone = {qid: by_hand(sparse.search(text, DEPTH), dense.hits(dense.search_arrays(text, DEPTH)), request.param, 0.3,
                          DEPTH, K) for qid, text in QUERIES.items()}
    texts = list(QUERIES.values())
    runs = zip(sparse.batch_search_arrays(texts, DEPTH, threads=2), dense.batch_search_arrays(texts, DEPTH))
    batch = {qid: by_hand(sparse.hits(s), dense.hits(d), request.param, 0.3, DEPTH, K) for qid, (s, d) in zip(QUERIES, runs)}
    return request.param, alone, batch


def fusion_flags(method: str) -> list[str]:
    weight = ["--fusion-weight", "0.3"] if method == "interpolation" else []  # rrf takes none
    return ["--dense-model", DENSE, "--fusion", method, *weight, "--fusion-depth", str(DEPTH)]


def test_the_api_equals_fusing_by_hand(corpus, expected):
    from bm25aug.search.hybrid import Fusion, HybridSearcher

    method, alone, batched = expected
    hybrid = HybridSearcher.from_pretrained("general", corpus[1], DENSE, Fusion(method, 0.3 if method == "interpolation" else None, DEPTH))
    for qid, text in QUERIES.items():
        assert [(h.docid, h.score) for h in hybrid.search(text, K)] == alone[qid]
    for threads in (1, 2):
        batch = hybrid.batch_search(list(QUERIES.values()), list(QUERIES), K, threads=threads)
        assert {q: [(h.docid, h.score) for h in hits] for q, hits in batch.items()} == batched
    assert any(len({d for d, _ in alone[q]} - {h.docid for h in hybrid.sparse.search(t, K)}) for q, t in QUERIES.items())


def test_the_cli_and_eval_equal_fusing_by_hand(corpus, expected, tmp_path):
    method, _, fused = expected  # both search the query file as one batch
    ds, flat = corpus
    queries = tmp_path / "q.tsv"
    queries.write_text("".join(f"{q}\t{t}\n" for q, t in QUERIES.items()))
    runs = {"search": tmp_path / "search.trec", "eval": tmp_path / "eval.trec"}
    assert main(["search", "--index", str(flat), "--model", "general", "--hybrid", *fusion_flags(method),
                 "--queries", str(queries), "--k", str(K), "--output", str(runs["search"])]) == 0
    assert main(["eval", "--dataset", str(ds.path), "--split", "test", "--method", "augmented-hybrid",
                 "--checkpoint", "general", "--index", str(flat), "--index-root", str(flat.parent),
                 *fusion_flags(method), "--k", str(K),
                 "--no-companions", "--output", str(runs["eval"])]) == 0
    for run in runs.values():
        got = read_trec_run(run)
        assert {q: [h.docid for h in hits] for q, hits in got.items()} == {q: [d for d, _ in f] for q, f in fused.items()}
        for qid, hits in got.items():
            assert np.allclose([h.score for h in hits], [s for _, s in fused[qid]], atol=1e-4)


def test_the_rest_server_equals_fusing_by_hand(corpus, expected, tmp_path):
    method, fused, _ = expected  # one request at a time: each query searched alone
    server = Server(["--index", f"gen={corpus[1]}", "--model", "gen=general", *fusion_flags(method)[2:],
                     "--dense", f"gen={DENSE}"], tmp_path / "serve.log")
    try:
        info = httpx.get(f"{server.url}/v1/indexes").json()
        assert info[0]["methods"] == ["bm25", "augmented", "dense", "hybrid"] and info[0]["default_method"] == "hybrid"
        for qid, text in QUERIES.items():
            answer = httpx.get(f"{server.url}/v1/gen/search", params={"query": text, "hits": K, "method": "hybrid"})
            assert answer.status_code == 200, answer.text
            got = answer.json()["candidates"]
            assert [c["docid"] for c in got] == [d for d, _ in fused[qid]]
            # another process: the dense model's threads may round a query's vector otherwise (last bits)
            assert [c["score"] for c in got] == pytest.approx([s for _, s in fused[qid]], abs=1e-6)
    finally:
        assert server.stop() == 0


def test_the_bm25_hybrid_and_the_companions_of_eval(corpus):
    """eval.py's augmented-hybrid brings the bm25-flat hybrid and dense alone, each as searched alone."""
    from bm25aug.eval.evaluate import EvalConfig, evaluate
    from bm25aug.search.bm25 import BM25Searcher
    from bm25aug.search.dense import DenseSearcher
    from bm25aug.search.hybrid import DEFAULT_FUSION

    ds, flat = corpus
    result = evaluate(EvalConfig(dataset=str(ds.path), split="test", method="augmented-hybrid", checkpoint="general",
                                 dense_model=DENSE, k=K, fusion_depth=DEPTH, threads=1, index_root=str(flat.parent)))
    assert list(result.metrics) == ["augmented-hybrid", "hybrid", "dense", "augmented", "bm25-flat"]
    bm25, dense = BM25Searcher(flat, flavor="flat"), DenseSearcher(flat, DENSE)
    for qid, text in QUERIES.items():
        hand = by_hand(bm25.search(text, DEPTH), dense.hits(dense.search_arrays(text, DEPTH)), DEFAULT_FUSION.method,
                       DEFAULT_FUSION.weight, DEPTH, K)
        assert [h.docid for h in result.runs["hybrid"][qid]] == [d for d, _ in hand]
        assert [h.docid for h in result.runs["dense"][qid]] == [h.docid for h in dense.hits(dense.search_arrays(text, K))]


def test_the_default_fusion_is_the_recorded_choice_and_equals_fusing_by_hand(corpus):
    """``DEFAULT_FUSION`` is what research/hybrid_defaults.py chose and recorded (its JSON's
    ``chosen``), and the general hybrid at it, every setting left to its default but the dense
    model, equals fusing the two runs by hand at that method, weight and depth."""
    from pathlib import Path

    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.dense import DenseSearcher
    from bm25aug.search.hybrid import DEFAULT_FUSION, HybridSearcher

    recorded = json.loads((Path(__file__).parents[1] / "docs" / "data" / "hybrid_defaults.json").read_text())
    assert recorded["chosen"] == DEFAULT_FUSION.describe()
    _, flat = corpus
    hybrid = HybridSearcher.from_pretrained("general", flat, DENSE)
    assert hybrid.fusion == DEFAULT_FUSION
    sparse = AugmentedSearcher.from_pretrained("general", flat)
    dense = DenseSearcher(sparse.bm25.index, DENSE)
    depth = DEFAULT_FUSION.depth
    for qid, text in QUERIES.items():
        hand = by_hand(sparse.search(text, depth), dense.hits(dense.search_arrays(text, depth)), DEFAULT_FUSION.method,
                       DEFAULT_FUSION.weight, depth, K)
        assert [(h.docid, h.score) for h in hybrid.search(text, K)] == hand, qid


def test_the_fusion_rules_by_their_formulas():
    from bm25aug.search.hybrid import Fusion, fuse

    sparse = TopK(np.array([3, 1, 4]), np.array([9.0, 5.0, 1.0], np.float32))
    dense = TopK(np.array([1, 5, 3]), np.array([0.9, 0.8, 0.7], np.float32))
    order = np.array([5, 4, 3, 2, 1, 0])  # external ids sort in the opposite order of doc numbers
    rrf = fuse(sparse, dense, 4, Fusion("rrf"), order)
    assert rrf.lucene_ids.tolist() == [1, 3, 5, 4]  # ranks 2 + 1, 1 + 3, - + 2, 3 + -
    assert rrf.scores.tolist() == [1 / 62 + 1 / 61, 1 / 61 + 1 / 63, 1 / 62, 1 / 63]  # the sparse side's share first
    mixed = fuse(sparse, dense, 5, Fusion("interpolation", weight=0.25), order)
    expect = {3: 0.25 * 1.0 + 0.75 * 0.0, 1: 0.25 * 0.5 + 0.75 * 1.0, 4: 0.25 * 0.0, 5: 0.75 * 0.5}
    assert dict(zip(mixed.lucene_ids.tolist(), mixed.scores.tolist())) == pytest.approx(expect)
    assert mixed.lucene_ids.tolist() == [1, 5, 3, 4]
    tie = fuse(TopK(np.array([0]), np.array([1.0], np.float32)), TopK(np.array([2]), np.array([1.0], np.float32)), 2,
               Fusion("rrf"), order)
    assert tie.lucene_ids.tolist() == [2, 0]  # equal sums: by external id (doc 2's sorts first here)
    assert len(fuse(TopK(np.zeros(0, np.int64), np.zeros(0, np.float32)),
                    TopK(np.zeros(0, np.int64), np.zeros(0, np.float32)), 3, Fusion(), order).lucene_ids) == 0


@pytest.mark.parametrize("settings, says", [
    ({"method": "max"}, "unknown fusion 'max'"), ({"weight": 1.5}, "--fusion-weight 1.5 is out of range"),
    ({"depth": 0}, "--fusion-depth 0 is out of range"), ({"rrf_k": -1}, "rrf_k -1 is out of range")])
def test_bad_fusion_settings_are_one_line(settings, says):
    from bm25aug.search.hybrid import Fusion

    with pytest.raises(UserError, match=says) as e:
        Fusion(**settings)
    assert "\n" not in str(e.value) and "fix:" in str(e.value)


def test_the_cli_refuses_a_fusion_flag_without_hybrid_and_hybrid_on_a_wp_index(tiny_wp, capsys):
    _, wp, flat = tiny_wp
    assert main(["search", "--index", str(flat), "--query", "cat", "--fusion", "rrf"]) == 2
    assert "--fusion sets up a hybrid search; fix: add --hybrid" in capsys.readouterr().err
    assert main(["search", "--index", str(wp), "--query", "cat", "--hybrid", "--dense-model", DENSE]) == 2
    err = capsys.readouterr().err.strip()
    assert "is a wp index, not flat; fix: pass a flat index" in err and len(err.splitlines()) == 1


def test_fusion_settings_are_refused_where_nothing_fuses(tmp_path, capsys):
    """A fusion flag on a method that fuses nothing, or a weight with rrf, is one line, not ignored."""
    from bm25aug.eval.evaluate import EvalConfig, evaluate
    from bm25aug.search.hybrid import Fusion
    from bm25aug.serve.config import IndexSpec, ServeConfig

    with pytest.raises(UserError, match="--fusion-weight is for the dense peer and hybrid search, and --method "
                                        "bm25-flat uses neither; fix"):
        evaluate(EvalConfig(dataset="scifact", method="bm25-flat", fusion_weight=0.5))
    with pytest.raises(UserError, match="a fusion weight is interpolation's"):
        Fusion.given("rrf", 0.9)
    with pytest.raises(UserError, match="fusion settings are for indexes served with --dense"):
        ServeConfig(indexes=[IndexSpec("x", "indexes/x")], fusion="rrf")
    with pytest.raises(UserError, match="a fusion weight is interpolation's"):
        ServeConfig(indexes=[IndexSpec("x", "indexes/x", dense=DENSE)], fusion="rrf", fusion_weight=0.9)
