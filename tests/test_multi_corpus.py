"""One model trained on several corpora: each batch is one corpus's, scored against that corpus's
index; dev selection runs on the union of the dev sets; the run records every corpus."""

import json
import random
from collections import Counter

import pytest

from bm25aug.errors import UserError
from bm25aug.train.arguments import TrainConfig
from bm25aug.train.corpora import epoch_batches, steps_per_epoch
from bm25aug.train.examples import Example
from bm25aug.train.trainer import Trainer
from conftest import write_beir

# The second corpus reuses the first one's document ids for other texts: a batch scored against
# the wrong index would find other words under the same ids.
OTHER_DOCS = {f"d{i}": (f"Topic {i}", text) for i, text in enumerate([
    "Volcanoes erupt molten lava and ash.", "Glaciers carve valleys over millennia.",
    "Coral reefs shelter many fish species.", "Deserts receive little rainfall each year.",
    "Rivers carry sediment down to the delta.", "Earthquakes release energy along faults.",
    "Tides follow the pull of the moon.", "Forests store carbon in their trees.",
    "Caves form where water dissolves limestone.", "Storms gather over warm ocean water."], 1)}
OTHER_QUERIES = {f"q{i}": q for i, q in enumerate([
    "lava eruption", "glacier valleys", "reef fish", "desert rain", "river delta sediment",
    "fault earthquake", "moon tides", "forest carbon", "limestone caves", "ocean storms"], 1)}


@pytest.fixture(scope="module")
def two_corpora(tmp_path_factory):
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index

    root = tmp_path_factory.mktemp("two")
    first = load_dataset(str(write_beir(root / "animals")))
    second = load_dataset(str(write_beir(root / "earth", OTHER_DOCS, OTHER_QUERIES)))
    return [first, second], [ensure_index(d, "flat", root / "indexes") for d in (first, second)]


def config(out, **kw):
    settings = dict(epochs=1, batch_size=3, dev_size=2, negative_depth=3, threads=1, target="flat",
                    significance=0.0, random_negatives=4) | kw
    return TrainConfig(dataset="animals+earth", output_dir=str(out), **settings)


def test_each_batch_is_scored_against_its_own_corpus(two_corpora, tmp_path):
    datasets, indexes = two_corpora
    trainer = Trainer(config(tmp_path / "run"), datasets, indexes)
    assert [c.name for c in trainer.corpora] == ["animals", "earth"]
    assert len(trainer.examples) == sum(len(c.examples) for c in trainer.corpora)
    seen = []
    score = trainer.compute_loss

    def spy(corpus, qb, w, a, rows, mask, relevant=None):
        seen.append((corpus.name, list(qb.terms), [str(corpus.bm25.docids[r]) for r in rows]))
        return score(corpus, qb, w, a, rows, mask, relevant)

    trainer.compute_loss = spy
    result = trainer.train()
    assert len(seen) == trainer.steps_per_epoch == steps_per_epoch(trainer.corpora, 3)
    assert {name for name, _, _ in seen} == {"animals", "earth"}
    for name, _, docids in seen:
        corpus = next(c for c in trainer.corpora if c.name == name)
        assert set(docids) <= set(corpus.bm25.docids.tolist())  # positives, hard, in-batch and random: its own
    # Each query's positive (column i) is its own corpus's document: the earth queries' positives
    # hold earth words, which the animal corpus's documents of the same ids do not.
    earth = next(c for c in trainer.corpora if c.name == "earth")
    for name, terms, docids in seen:
        if name == "earth":
            for query_terms, positive in zip(terms, docids):
                row = earth.bm25.rows([positive])[0]
                cols, _ = earth.bm25._rows[row]
                assert {earth.bm25.terms[c] for c in cols} & set(query_terms)
    # Dev selection ran on the union of both dev sets: epoch 0 is BM25's mean over all of them.
    name, per_query, _ = trainer.dev_scores(None)
    assert {corpus for corpus, _ in per_query} == {"animals", "earth"}
    assert len(per_query) == sum(len(c.dev.queries) for c in trainer.corpora)
    assert result["history"][0]["dev_metric"] == pytest.approx(sum(per_query.values()) / len(per_query))
    out = tmp_path / "run"
    data = json.loads((out / "data.json").read_text())
    assert data["dataset"] == "animals+earth" and len(data["corpus_fingerprint"].split("+")) == 2
    assert set(json.loads((out / "dev_split.json").read_text())["qids"]) == {"animals", "earth"}
    assert (out / "hard_negatives.animals.json").exists() and (out / "hard_negatives.earth.json").exists()

    from bm25aug.model.augmenter import QueryAugmenter

    assert QueryAugmenter.from_pretrained(out / "best").config.target == "flat"


def test_resume_refuses_other_corpora(two_corpora, tmp_path):
    datasets, indexes = two_corpora
    out = tmp_path / "run"
    Trainer(config(out), datasets, indexes).train()
    with pytest.raises(UserError, match="other corpora than the saved run"):
        Trainer(config(out, epochs=2), datasets[:1], indexes[:1], resume=True)
    with pytest.raises(UserError, match="one index each"):
        Trainer(config(tmp_path / "x"), datasets, indexes[:1])


def _examples(n: int, corpus: int) -> list[Example]:
    return [Example(f"{corpus}-{i}", "q", [i], [], corpus) for i in range(n)]


class _Corpus:
    def __init__(self, examples):
        self.examples = examples


def test_epoch_batches_proportional_and_tempered():
    small, large = _Corpus(_examples(10, 0)), _Corpus(_examples(90, 1))
    batches = epoch_batches([small, large], 5, 1.0, random.Random(0))
    assert all(len({e.corpus for e in b}) == 1 for b in batches)
    assert Counter(e.qid for b in batches for e in b) == Counter(e.qid for e in small.examples + large.examples)
    assert len(batches) == steps_per_epoch([small, large], 5) == 20
    tempered = [epoch_batches([small, large], 5, 1000.0, random.Random(s)) for s in range(20)]
    share = sum(b[0].corpus == 0 for run in tempered for b in run) / sum(map(len, tempered))
    assert 0.4 < share < 0.6  # near-uniform over corpora, where size alone gives 0.1
    assert all(len(run) == 20 and all(len({e.corpus for e in b}) == 1 for b in run) for run in tempered)
    cold = epoch_batches([_Corpus(_examples(100_000, 0)), small], 5, 0.01, random.Random(0))  # no overflow
    assert all(b[0].corpus == 0 for b in cold)  # size ** 100: the large corpus alone


def test_one_corpus_draws_as_before():
    """A one-corpus epoch is the shuffle training always made, and draws nothing more from the
    generator (the batches' documents are drawn from it next): earlier runs reproduce."""
    corpus = _Corpus(_examples(23, 0))
    rng, reference = random.Random(7), random.Random(7)
    batches = epoch_batches([corpus], 4, 3.0, rng)
    order = list(range(23))
    reference.shuffle(order)
    assert [[e.qid for e in b] for b in batches] == [[f"0-{j}" for j in order[i:i + 4]] for i in range(0, 23, 4)]
    assert rng.random() == reference.random()


def test_the_train_command_needs_data(capsys):
    from bm25aug import recipes
    from bm25aug.cli import main

    assert recipes.datasets("general3") == ["scifact", "nfcorpus", "squad"]
    assert recipes.datasets("general") == ["scifact", "nfcorpus", "squad", "squadshifts-wiki", "squadshifts-reddit",
                                           "squadshifts-amazon", "medquad"]
    assert recipes.datasets("scifact") == []
    assert main(["train", "--recipe", "scifact"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no training data" in err[0] and "general" in err[0]


def test_epoch_steps_caps_an_epoch_and_each_epoch_draws_anew():
    small, large = _Corpus(_examples(10, 0)), _Corpus(_examples(90, 1))
    assert steps_per_epoch([small, large], 5, cap=7) == 7 and steps_per_epoch([small, large], 5, cap=100) == 20
    first = epoch_batches([small, large], 5, 3.0, random.Random(1), cap=7)
    second = epoch_batches([small, large], 5, 3.0, random.Random(2), cap=7)
    assert len(first) == len(second) == 7 and all(len({e.corpus for e in b}) == 1 for b in first)
    assert [e.qid for b in first for e in b] != [e.qid for b in second for e in b]  # another seeded draw
    assert epoch_batches([small, large], 5, 3.0, random.Random(1), cap=7) == first  # the same seed, the same draw
