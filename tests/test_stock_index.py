"""Indexes bm25aug did not build: Pyserini's own indexer, searched by both searcher classes."""

import json

import pytest

from conftest import TINY_DOCS


def pyserini_index(path, tokenizer=None, ids=None):
    """Index the tiny corpus with Pyserini's programmatic indexer (flat, or pretokenized wp);
    ``ids`` renames documents (``{"d2": "other"}``)."""
    from bm25aug.lucene.jvm import start_jvm
    from bm25aug.tokenization import untruncated

    start_jvm()
    from pyserini.index.lucene import LuceneIndexer

    args = ["-index", str(path), "-storeRaw"] + (["-pretokenized"] if tokenizer is not None else [])
    indexer = LuceneIndexer(args=args, threads=1)
    texts = [f"{title} {text}" for title, text in TINY_DOCS.values()]
    if tokenizer is not None:
        texts = [" ".join(e.tokens) for e in untruncated(tokenizer).encode_batch(texts, add_special_tokens=False)]
    for docid, text in zip(TINY_DOCS, texts):
        indexer.add_doc_raw(json.dumps({"id": (ids or {}).get(docid, docid), "contents": text}))
    indexer.close()
    return path


def test_stock_flat_index_searched_by_both_classes(tiny_wp, tmp_path, flat_model):
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher

    _, _, ours = tiny_wp
    stock = pyserini_index(tmp_path / "stock.flat")
    before = sorted(p.name for p in stock.iterdir())
    searcher = BM25Searcher(stock)
    assert searcher.meta.flavor == "flat" and searcher.meta.stock
    for q in ("cat on a mat", "electric car garage", "lions"):
        assert searcher.search(q, 5) == BM25Searcher(ours).search(q, 5)
    augmented = AugmentedSearcher(flat_model, searcher)
    hits = augmented.search("big cats and lions", 3)
    assert hits and hits[0].docid == "d3"
    assert sorted(p.name for p in stock.iterdir()) == before  # nothing written into a stock index


def test_stock_wp_index_needs_its_tokenizer(tiny_wp, tmp_path, offline_model):
    from bm25aug.errors import UserError
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher

    _, ours, _ = tiny_wp
    stock = pyserini_index(tmp_path / "stock.wp", offline_model.tokenizer)
    with pytest.raises(UserError, match="--tokenizer"):
        BM25Searcher(stock, flavor="wp")
    searcher = BM25Searcher(stock, tokenizer="bert-base-uncased")
    assert searcher.meta.flavor == "wp"
    for q in ("cat on a mat", "galaxies telescope"):
        assert searcher.search(q, 5) == BM25Searcher(ours).search(q, 5)
    augmented = AugmentedSearcher(offline_model, searcher)
    assert augmented.search("cat on a mat", 3)[0].docid == "d1"


def test_eval_cli_on_a_stock_index(tiny_beir, tmp_path):
    """``eval.py --index DIR`` runs the asked method on the given index and reports it."""
    from bm25aug.cli import main

    stock = pyserini_index(tmp_path / "stock.flat")
    out = tmp_path / "m.json"
    assert main(["eval", "--dataset", str(tiny_beir), "--method", "bm25-flat", "--index", str(stock),
                 "--index-root", str(tmp_path / "idx"), "--json-out", str(out)]) == 0
    m = json.loads(out.read_text())
    assert m["ndcg@10"] > 0.9 and m["remove_query"] is False
