"""Pseudo-queries cut from the corpus (bm25aug.pseudo), and training with them."""

from bm25aug.corpus import Document
from bm25aug.data import Split
from bm25aug.pseudo import MAX_WORDS, MIN_WORDS, PREFIX, pseudo_queries, sample_ids, with_pseudo_queries

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
    from bm25aug.training import Trainer

    ds, _, flat = tiny_wp
    trainer = Trainer(tiny_config(tmp_path / "p", target="flat", pseudo_queries=3), ds, flat)
    pseudo = [e for e in trainer.examples if e.qid.startswith(PREFIX)]
    assert pseudo and all(len(e.positives) == 1 for e in pseudo)
    assert len(trainer.train()["history"]) == 2
