"""Pseudo-queries cut from the corpus (bm25aug.train.pseudo), and training with them."""

import pytest
import torch

from bm25aug.data.corpus import Document
from bm25aug.data.layouts import Split
from bm25aug.train.pseudo import MAX_WORDS, MIN_WORDS, PREFIX, pseudo_queries, sample_ids, with_pseudo_queries

LONG = "This sentence has exactly eight words in it."
CORPUS = {
    "a": Document("t", f"Short one. {LONG} Another short."),
    "b": Document("t", "None is long enough. Tiny. Small."),
    "c": Document("t", f"{LONG} " + " ".join(["word"] * (MAX_WORDS + 5)) + "."),
    **{f"d{i}": Document("t", f"Document {i} says one plain thing about topic number {i}.") for i in range(40)},
}


def test_sample_ids_is_uniform_without_replacement_and_seeded():
    import random

    first = sample_ids(CORPUS, 10, random.Random(1))
    assert len(set(first)) == 10 and set(first) <= set(CORPUS)
    assert first == sample_ids(CORPUS, 10, random.Random(1)) != sample_ids(CORPUS, 10, random.Random(2))
    assert sorted(sample_ids(CORPUS, 1000, random.Random(1))) == sorted(CORPUS)  # n >= corpus: all of it


def test_a_pseudo_query_is_one_sentence_of_its_positive_document():
    split = pseudo_queries(CORPUS, len(CORPUS), seed=3)
    assert PREFIX + "b" not in split.queries  # no sentence of 6-40 words
    assert split.queries[PREFIX + "a"] == LONG and split.queries[PREFIX + "c"] == LONG
    for qid, query in split.queries.items():
        docid = qid.removeprefix(PREFIX)
        assert split.qrels[qid] == {docid: 1} and query in CORPUS[docid].text
        assert MIN_WORDS <= len(query.split()) <= MAX_WORDS


def test_with_pseudo_queries_keeps_the_judged_queries():
    train = Split({"q1": "real query"}, {"q1": {"a": 1}})
    every_doc_has_a_sentence = {d: doc for d, doc in CORPUS.items() if d != "b"}
    merged = with_pseudo_queries(train, every_doc_has_a_sentence, 5, seed=0)
    assert merged.queries["q1"] == "real query" and merged.qrels["q1"] == {"a": 1}
    assert len(merged.queries) == 6


def test_training_with_pseudo_queries(tiny_wp, tmp_path):
    from tests.test_training import tiny_config
    from bm25aug.train.trainer import Trainer

    ds, _, flat = tiny_wp
    trainer = Trainer(tiny_config(tmp_path / "p", target="flat", pseudo_queries=3), ds, flat)
    pseudo = [e for e in trainer.examples if e.qid.startswith(PREFIX)]
    assert pseudo and all(len(e.positives) == 1 for e in pseudo)
    assert len(trainer.train()["history"]) == 2
    assert all(e.positives[0] < 0 for e in pseudo)  # the held-out rows (the sentence taken out)
    docs = trainer.corpora[0].bm25.rows([e.qid.removeprefix(PREFIX) for e in pseudo])
    assert all(doc in trainer.corpora[0].qrels_rows[e.qid] for e, doc in zip(pseudo, docs))  # never its own negative


HELD_OUT = "Mitochondria power every living cell, and cells need power."
KEPT = "Stem cells divide quickly in the bone marrow."


@pytest.mark.parametrize("flavor", ["flat", "wp"])
def test_a_held_out_row_is_its_document_indexed_without_the_sentence(tmp_path, flavor):
    """The positive of a pseudo-query equals, column for column and bit for bit, the row of the
    same document indexed without its sentence (same index, so the same df and avgdl)."""
    from collections import Counter

    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index
    from bm25aug.model.augmenter import AugmenterConfig
    from bm25aug.model.targets import make_target
    from bm25aug.tokenization import load_tokenizer
    from bm25aug.train.torch_bm25 import TorchBM25
    from tests.conftest import TINY_DOCS, write_beir

    docs = {**TINY_DOCS, "full": ("Cells", f"{KEPT} {HELD_OUT}"), "rest": ("Cells", KEPT)}
    ds = load_dataset(str(write_beir(tmp_path / "cells", docs=docs)))
    tokenizer = load_tokenizer()
    bm25 = TorchBM25(ensure_index(ds, flavor, tmp_path / "indexes"), tokenizer.get_vocab() if flavor == "wp" else None)
    removed = Counter(make_target(tokenizer, AugmenterConfig(target=flavor)).batch([HELD_OUT]).terms[0])
    full, rest = bm25.rows(["full", "rest"])
    held = bm25.held_out_row(full, removed)
    assert held < 0 and bm25.held_out_row(full, removed) == held - 1  # each call a new row
    dense = bm25.doc_matrix([held, rest, full]).to_dense()
    assert torch.equal(dense[0], dense[1]) and not torch.equal(dense[0], dense[2])
