"""Multifield indexes (Pyserini's BEIR layout: title and text as two fields), and the stock index
kinds bm25aug recognises only to refuse: every path searches both fields exactly as Pyserini's
``search(..., fields={"contents": 1.0, "title": 1.0})`` does, and nothing is searched as what it is not."""

import functools
import json
import shutil

import pytest

from bm25aug.errors import UserError
from conftest import TINY_DOCS, TINY_QUERIES, write_beir

# "felines" and "astronomy" are only in titles; "cats" in a title and in texts.
QUERIES = ["felines", "astronomy telescope", "cat on a mat", "big cats lions", "weather rain", "", "the",
           "Cats AND dogs: (barking)?"]


def anserini(main_class: str, *args: str) -> None:
    from bm25aug.lucene.jvm import jclass
    from bm25aug.lucene.reader import java

    java()  # the JVM with Anserini's classpath
    jclass(f"io.anserini.index.{main_class}").main(["-threads", "1", *args])


def stock_multifield(corpus_dir, path):
    """A BEIR corpus indexed by Anserini itself, as Pyserini's prebuilt multifield indexes are."""
    folder = path.parent / f"{path.name}.input"
    folder.mkdir()
    shutil.copy(corpus_dir / "corpus.jsonl", folder / "corpus.jsonl")
    anserini("IndexCollection", "-collection", "BeirMultifieldCollection", "-generator", "DefaultLuceneDocumentGenerator",
             "-input", str(folder), "-index", str(path), "-fields", "title", "-storePositions", "-storeDocvectors",
             "-storeRaw", "-quiet")
    return path


@functools.lru_cache(maxsize=None)
def pyserini(index_dir):
    from pyserini.search.lucene import LuceneSearcher

    searcher = LuceneSearcher(str(index_dir))
    searcher.set_bm25(0.9, 0.4)
    return searcher


def pyserini_fields(index_dir, query: str, k: int, fields=None):
    """Pyserini's bm25-multifield search (its 2CR: --fields contents=1.0 title=1.0)."""
    hits = pyserini(str(index_dir)).search(query, k, fields=fields or {"contents": 1.0, "title": 1.0})
    return [(h.docid, h.score) for h in hits]


def pyserini_terms(index_dir, terms: dict[str, float], fields: dict[str, float], k: int):
    """A weighted term list over both fields with Pyserini's and Lucene's classes alone: one boosted
    group of boosted TermQuery clauses per field."""
    from jnius import autoclass
    from pyserini.search.lucene import querybuilder

    term, term_query = autoclass("org.apache.lucene.index.Term"), autoclass("org.apache.lucene.search.TermQuery")
    should = querybuilder.JBooleanClauseOccur["should"].value
    outer = querybuilder.get_boolean_query_builder()
    for field, field_weight in fields.items():
        inner = querybuilder.get_boolean_query_builder()
        for token, weight in terms.items():
            inner.add(querybuilder.get_boost_query(term_query(term(field, token)), weight), should)
        outer.add(querybuilder.get_boost_query(inner.build(), field_weight), should)
    return [(h.docid, h.score) for h in pyserini(str(index_dir)).search(outer.build(), k)]


@pytest.fixture(scope="module")
def tiny_multifield(tmp_path_factory):
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index

    root = tmp_path_factory.mktemp("mf")
    ds = load_dataset(str(write_beir(root / "tiny")))
    return ds, ensure_index(ds, "multifield", root / "indexes"), stock_multifield(ds.path, root / "stock.multifield")


def pairs(hits):
    return [(h.docid, h.score) for h in hits]


def test_multifield_build_is_pyserinis_layout_and_searched_as_pyserini_searches_it(tiny_multifield):
    """`bm25aug index --flavor multifield` writes what Anserini's own BeirMultifieldCollection build
    writes; BM25Searcher one by one, batch search on 1 and 2 threads and the stock index all give
    Pyserini's multifield hits and scores."""
    from bm25aug.lucene.index import IndexMeta, run
    from bm25aug.search.bm25 import BM25Searcher

    ds, ours, stock = tiny_multifield
    meta = IndexMeta.load(ours)
    assert meta.flavor == "multifield" and "BeirMultifieldCollection" in meta.anserini and meta.docvectors
    assert IndexMeta.load(stock).flavor == "multifield" and IndexMeta.load(stock).stock
    for index in (ours, stock):
        searcher = BM25Searcher(index)
        assert searcher.meta.flavor == "multifield" and searcher.fields == {"contents": 1.0, "title": 1.0}
        alone = [searcher.search(q, 5) for q in QUERIES]
        assert alone[0] and alone[0][0].docid == "d3"  # a title-only match: contents alone has none
        for q, hits in zip(QUERIES, alone):
            assert pairs(hits) == (pyserini_fields(index, q, 5) if q.strip() else []), q
        for threads in (1, 2):
            assert [searcher.hits(t) for t in searcher.batch_search_arrays(QUERIES, 5, threads)] == alone
        assert pairs(searcher.search("felines", 8)) == pairs(BM25Searcher(ours).search("felines", 8))
    # run() is what `bm25aug index --flavor multifield` calls; a second run finds the index up to date.
    run(__import__("argparse").Namespace(dataset=str(ds.path), data_dir=None, flavor=["multifield"],
                                          index_root=str(ours.parent), threads=1, force=False))
    assert IndexMeta.load(ours).build_seconds == meta.build_seconds


def test_eval_ranks_as_the_searcher_and_refuses_the_other_flavor(tiny_multifield, tiny_wp, tmp_path):
    from bm25aug.eval.evaluate import EvalConfig, evaluate
    from bm25aug.search.bm25 import BM25Searcher

    ds, ours, stock = tiny_multifield
    _, _, flat = tiny_wp
    for index in (None, str(stock)):
        result = evaluate(EvalConfig(dataset=str(ds.path), method="bm25-multifield", index=index, k=5, threads=2,
                                     index_root=str(ours.parent), companions=False))
        searcher = BM25Searcher(stock if index else ours)
        assert result.runs["bm25-multifield"] == {q: searcher.search(t, 5) for q, t in TINY_QUERIES.items()}
    with pytest.raises(UserError, match="is a multifield index .* would leave out its titles; fix: .*bm25-multifield"):
        evaluate(EvalConfig(dataset=str(ds.path), method="bm25-flat", index=str(stock), companions=False))
    with pytest.raises(UserError, match="not multifield|no 'title' field"):
        evaluate(EvalConfig(dataset=str(ds.path), method="bm25-multifield", index=str(flat), companions=False))
    with pytest.raises(UserError, match="rm3 analyzes queries|is a multifield index"):
        evaluate(EvalConfig(dataset=str(ds.path), method="bm25-rm3", index=str(stock), companions=False))


def test_field_weights_are_pyserinis_fields_argument(tiny_multifield, tiny_wp):
    from bm25aug.search.bm25 import BM25Searcher

    _, ours, _ = tiny_multifield
    _, _, flat = tiny_wp
    weights = {"contents": 1.0, "title": 0.35}
    searcher = BM25Searcher(ours, fields=weights)
    for q in QUERIES[:5]:
        assert pairs(searcher.search(q, 5)) == pyserini_fields(ours, q, 5, weights), q
    assert [searcher.hits(t) for t in searcher.batch_search_arrays(QUERIES, 5, 2)] == [searcher.search(q, 5) for q in QUERIES]
    for bad in ({"title": 0.0}, {"title": float("nan")}, {"contents": -1.0}, {}, {"a b": 1.0}):
        with pytest.raises(UserError, match="field weights"):
            BM25Searcher(ours, fields=bad)
    with pytest.raises(UserError, match="a flat index with one field"):
        BM25Searcher(flat, fields=weights)


def test_augmented_over_multifield_one_by_one_equals_batch_and_plain_pyserini(tiny_multifield, tiny_wp, flat_model,
                                                                              offline_model):
    """A flat-target model's term list over both fields: searched one by one, in batches on 1 and 2
    threads, and as a plain Pyserini query of the same term list, the same hits; a term only a
    title has is kept (it scores there). Its field weights are its own: the plain BM25 searcher it
    wraps (which the server also serves) keeps Pyserini's."""
    from bm25aug.search.augmented import AUGMENTED_FIELD_WEIGHTS, AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher

    _, ours, stock = tiny_multifield
    _, _, flat = tiny_wp
    for bm25, weights in ((BM25Searcher(stock), None), (BM25Searcher(ours), {"contents": 1.0, "title": 3.0})):
        augmented = AugmentedSearcher(flat_model, bm25, fields=weights)
        assert augmented.fields == (weights or AUGMENTED_FIELD_WEIGHTS) and bm25.fields == {"contents": 1.0, "title": 1.0}
        assert [augmented.search(q, 5) for q in QUERIES] == [bm25.search_terms(augmented.term_list(q), 5, augmented.fields)
                                                            for q in QUERIES]
        # Encoded in a batch (the torch model: padding moves weights by float rounding), then searched.
        lists = augmented.term_lists(QUERIES)
        alone = [bm25.search_terms(t, 5, augmented.fields) for t in lists]
        for threads in (1, 2):
            assert [augmented.hits(t) for t in augmented.batch_search_arrays(QUERIES, 5, threads)] == alone
            assert [bm25.hits(t) for t in augmented.batch_search_terms_arrays(lists, 5, threads)] == alone
        for terms, hits in zip(lists, alone):
            if terms:
                assert pairs(hits) == pyserini_terms(bm25.index_dir, terms, augmented.fields, 5), terms
        assert "felin" in augmented.term_list("felines") and "d3" in [h.docid for h in alone[0]]
    assert alone != [bm25.search_terms(t, 5) for t in lists]  # the weights are searched, not Pyserini's
    with pytest.raises(UserError, match="is a multifield index but the model was trained for wp"):
        AugmentedSearcher(offline_model, BM25Searcher(stock))
    with pytest.raises(UserError, match="a flat index with one field"):
        AugmentedSearcher(flat_model, BM25Searcher(flat), fields={"contents": 1.0, "title": 0.5})
    assert AugmentedSearcher(flat_model, BM25Searcher(flat)).fields is None


def test_augmented_multifield_method_runs_a_flat_model_and_refuses_a_wp_one(tiny_multifield, flat_model,
                                                                          offline_model, tmp_path):
    from bm25aug.eval.evaluate import EvalConfig, evaluate
    from bm25aug.search.augmented import AugmentedSearcher

    ds, ours, _ = tiny_multifield
    flat_model.save_pretrained(tmp_path / "flat")
    config = EvalConfig(dataset=str(ds.path), method="augmented-multifield", checkpoint=str(tmp_path / "flat"), k=5,
                        runtime="torch-fp32", index_root=str(ours.parent), threads=2)
    result = evaluate(config)
    assert list(result.metrics) == ["augmented-multifield", "bm25-multifield", "bm25-flat", "augmented"]
    searcher = AugmentedSearcher.from_pretrained(tmp_path / "flat", ours, runtime="torch-fp32")
    assert searcher.bm25.meta.flavor == "multifield"
    assert result.runs["augmented-multifield"] == {q: searcher.search(t, 5) for q, t in TINY_QUERIES.items()}
    assert "added_precision_weight" not in result.metrics["augmented-multifield"]  # read from one field only
    offline_model.save_pretrained(tmp_path / "wp")
    with pytest.raises(UserError, match="augmented-multifield searches a multifield index with a flat-target model"):
        evaluate(EvalConfig(dataset=str(ds.path), method="augmented-multifield", checkpoint=str(tmp_path / "wp")))


def test_checkpoint_dev_is_the_queries_its_training_run_held_out(tiny_multifield, flat_model, tmp_path):
    """``--split checkpoint-dev``: what field weights were chosen on, never a test split."""
    from bm25aug.eval.evaluate import EvalConfig, evaluate

    ds, ours, _ = tiny_multifield
    run = tmp_path / "run"
    flat_model.save_pretrained(run / "best")
    (run / "dev_split.json").write_text(json.dumps({"how": "seeded slice of train", "qids": ["q2", "q5"]}))
    config = EvalConfig(dataset=str(ds.path), method="augmented-multifield", split="checkpoint-dev", checkpoint=str(run),
                        k=5, runtime="torch-fp32", index_root=str(ours.parent), companions=False,
                        fields={"contents": 1.0, "title": 0.5})
    result = evaluate(config)
    assert set(result.runs["augmented-multifield"]) == {"q2", "q5"} and result.split == "checkpoint-dev"
    (run / "dev_split.json").write_text(json.dumps({"how": "union", "qids": {"other": ["q1"]}}))
    with pytest.raises(UserError, match="does not name dev queries of tiny"):
        evaluate(config)
    (run / "dev_split.json").unlink()
    with pytest.raises(UserError, match="has no dev_split.json beside it"):
        evaluate(config)
    with pytest.raises(UserError, match="field weights are for a multifield index, and bm25-flat"):
        evaluate(EvalConfig(dataset=str(ds.path), method="bm25-flat", fields={"title": 0.5}))


def test_no_multifield_index_without_titles(tmp_path):
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import IndexMeta, ensure_index

    untitled = load_dataset(str(write_beir(tmp_path / "untitled", docs={d: ("", t) for d, (_, t) in TINY_DOCS.items()})))
    with pytest.raises(UserError, match="no multifield index: no document has a title, .*; fix: use its flat index"):
        ensure_index(untitled, "multifield", tmp_path / "idx")
    marco = tmp_path / "mm"
    marco.mkdir()
    (marco / "collection.tsv").write_text("0\tfirst passage\n1\tsecond passage\n")
    (marco / "queries.dev.tsv").write_text("7\twhat is second\n")
    (marco / "qrels.dev.tsv").write_text("7\t0\t1\t1\n")
    with pytest.raises(UserError, match="MS MARCO passages have no title"):
        ensure_index(load_dataset(str(marco)), "multifield", tmp_path / "idx")
    dpr = tmp_path / "qa"  # DPR: the title is the passage's article title
    dpr.mkdir()
    (dpr / "passages.tsv").write_text("id\ttext\ttitle\np1\tIt is the capital of France.\tParis\n"
                                      "p2\tBerlin is in Germany.\tBerlin\n")
    (dpr / "test.qa.tsv").write_text("capital of france?\t['Paris']\n")
    index = ensure_index(load_dataset(str(dpr)), "multifield", tmp_path / "idx")
    from bm25aug.search.bm25 import BM25Searcher

    assert IndexMeta.load(index).flavor == "multifield" and BM25Searcher(index).search("paris", 1)[0].docid == "p1"


def test_impact_dense_and_unknown_indexes_are_refused_by_name(tmp_path):
    from bm25aug.search.bm25 import BM25Searcher

    impact_in, dense_in, fields_in = (tmp_path / n for n in ("impact_in", "dense_in", "fields_in"))
    for folder, rows in ((impact_in, [{"id": "d1", "contents": "cat sat", "vector": {"cat": 12, "##s": 3, "mat": 5}},
                                      {"id": "d2", "contents": "dog", "vector": {"dog": 7, "the": 2}}]),
                         (dense_in, [{"docid": "d1", "vector": [0.1, 0.2, 0.3, 0.4]},
                                     {"docid": "d2", "vector": [0.4, 0.3, 0.2, 0.1]}]),
                         (fields_in, [{"id": "d1", "contents": "a cat", "url": "cats example"},
                                      {"id": "d2", "contents": "a dog", "url": "dogs example"}])):
        folder.mkdir()
        (folder / "part.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    anserini("IndexCollection", "-collection", "JsonVectorCollection", "-generator", "DefaultLuceneDocumentGenerator",
             "-input", str(impact_in), "-index", str(tmp_path / "impact"), "-impact", "-pretokenized", "-quiet")
    anserini("IndexFlatDenseVectors", "-collection", "JsonDenseVectorCollection", "-input", str(dense_in),
             "-index", str(tmp_path / "dense"), "-generator", "DenseVectorDocumentGenerator")
    anserini("IndexCollection", "-collection", "JsonCollection", "-generator", "DefaultLuceneDocumentGenerator",
             "-input", str(fields_in), "-index", str(tmp_path / "fields"), "-fields", "url", "-quiet")
    (tmp_path / "faiss").mkdir()
    for name in ("index", "docid"):
        (tmp_path / "faiss" / name).write_bytes(b"")
    refused = {"impact": "is an impact index .* learned weights stored as frequencies",
               "dense": "is a dense vector index \\('vector', 4 dimensions\\)",
               "fields": "indexes fields bm25aug does not search \\(url\\)",
               "faiss": "is a Faiss dense index"}
    for name, message in refused.items():
        for make in (lambda p: BM25Searcher(p), lambda p: BM25Searcher(p, flavor="flat"),
                     lambda p: BM25Searcher(p, tokenizer="bert-base-uncased"),
                     lambda p: BM25Searcher(p, flavor="multifield")):
            with pytest.raises(UserError, match=message):
                make(tmp_path / name)


@pytest.mark.realdata
def test_scifact_bm25_multifield_is_pyserinis_2cr_number_hit_for_hit(scifact, tmp_path):
    """SciFact test, 300 queries, 1000 hits: Pyserini's multifield hits and scores exactly, one by
    one and in batches on 2 threads, and its 2CR nDCG@10 (0.6647) and R@100 (0.9076)."""
    from bm25aug.eval.evaluate import EvalConfig, evaluate
    from bm25aug.lucene.index import ensure_index
    from bm25aug.search.bm25 import BM25Searcher

    index = ensure_index(scifact, "multifield")
    searcher = BM25Searcher(index)
    queries = list(scifact.split("test").queries.values())
    batch = searcher.batch_search_arrays(queries, 1000, threads=2)
    for query, top in zip(queries, batch):
        got = searcher.search(query, 1000)
        assert pairs(got) == pyserini_fields(index, query, 1000), query
        assert searcher.hits(top) == got, query
    metrics = evaluate(EvalConfig(dataset="scifact", method="bm25-multifield", companions=False)).metrics
    assert round(metrics["bm25-multifield"]["ndcg@10"], 4) == 0.6647
    assert round(metrics["bm25-multifield"]["recall@100"], 4) == 0.9076


def test_exported_term_lists_searched_with_terms_on_multifield_rank_as_the_model(tiny_multifield, flat_model, tmp_path):
    """``bm25aug search --terms`` on a multifield index weighs the fields as AugmentedSearcher does."""
    from bm25aug.cli import main
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.trec import read_trec_run

    ds, index, _ = tiny_multifield
    flat_model.save_pretrained(tmp_path / "model")
    searcher = AugmentedSearcher.from_pretrained(tmp_path / "model", index)
    queries = ds.split("test").queries
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"id": q, "vector": searcher.term_list(t)}) + "\n"
                                              for q, t in queries.items()))
    assert main(["search", "--index", str(index), "--terms", str(tmp_path / "q.jsonl"), "--k", "5",
                 "--output", str(tmp_path / "run.trec")]) == 0
    run = read_trec_run(tmp_path / "run.trec")
    for qid, q in queries.items():
        assert [(h.docid, round(h.score, 4)) for h in run[qid]] == \
            [(h.docid, round(h.score, 4)) for h in searcher.search(q, k=5)]


def test_eval_fields_flag_is_pyserinis_spelling(tmp_path):
    from bm25aug.errors import UserError
    from bm25aug.eval.command import parse_fields

    assert parse_fields(["contents=1.0", "title=0.25"]) == {"contents": 1.0, "title": 0.25}
    assert parse_fields(None) is None
    for bad in (["title"], ["title=x"], ["title=nan"]):
        with pytest.raises(UserError, match="is not FIELD=WEIGHT"):
            parse_fields(bad)
