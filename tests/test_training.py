"""Training end to end on a tiny corpus: runs, logs, checkpoints atomically, resumes."""

import json

import pytest

from bm25aug.errors import UserError
from bm25aug.train.arguments import TrainConfig
from bm25aug.train.callbacks import WeightAverage
from bm25aug.train.trainer import Trainer


def tiny_config(out, **kw):
    # No significance check: two dev queries cannot show a gain (its own test sets it).
    settings = dict(epochs=1, batch_size=4, dev_size=2, negative_depth=3, threads=1, target="wp", significance=0.0) | kw
    return TrainConfig(dataset="tiny", output_dir=str(out), **settings)


def test_train_then_resume(tiny_wp, tmp_path):
    ds, wp, _ = tiny_wp
    out = tmp_path / "run"
    result = Trainer(tiny_config(out), ds, wp).train()
    assert (out / "best" / "model.safetensors").exists() and (out / "last" / "trainer_state.pt").exists()
    assert (out / "curves.png").stat().st_size > 1000
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in log] == [0, 1] and "train_rank" in log[1]
    assert json.loads((out / "dev_split.json").read_text())["how"].startswith("seeded slice of train")
    assert result["best_dev_metric"] >= 0
    with pytest.raises(UserError, match="--resume"):
        Trainer(tiny_config(out), ds, wp)
    resumed = Trainer(tiny_config(out, epochs=2), ds, wp, resume=True).train()
    assert [r["epoch"] for r in resumed["history"]] == [0, 1, 2]  # continued, not restarted
    with pytest.raises(UserError, match="differ from the saved run"):
        Trainer(tiny_config(out, lam=0.5), ds, wp, resume=True)
    with pytest.raises(UserError, match="the saved run has trained 2"):  # its log and best/ would not match
        Trainer(tiny_config(out), ds, wp, resume=True)


def test_flat_target_trains_calibrates_its_gate_and_old_runs_resume(tiny_wp, tmp_path):
    """The default target (flat) trains on a flat index; after training, best/ carries the gate;
    a run saved before targets existed resumes as the wp run it was."""
    from bm25aug.model.augmenter import QueryAugmenter

    ds, wp, flat = tiny_wp
    out = tmp_path / "flat"
    Trainer(tiny_config(out, target="flat", weight_floor=1.0), ds, flat).train()
    best = QueryAugmenter.from_pretrained(out / "best")
    assert best.config.target == "flat" and best.config.weight_floor == 1.0 and best.config.aug_gate >= 1
    with pytest.raises(UserError, match="flat index"):
        Trainer(tiny_config(tmp_path / "mismatch", target="flat"), ds, wp)
    legacy = tmp_path / "legacy"
    Trainer(tiny_config(legacy, weight_floor=0.0), ds, wp).train()
    saved = json.loads((legacy / "config.json").read_text())
    for key in ("target", "weight_floor", "gate_quantile", "pooling", "penalty_floor"):
        saved.pop(key)
    (legacy / "config.json").write_text(json.dumps(saved))
    Trainer(tiny_config(legacy, weight_floor=0.0, epochs=2), ds, wp, resume=True).train()
    with pytest.raises(UserError, match="target"):
        Trainer(tiny_config(legacy, target="flat", weight_floor=0.0, epochs=2), ds, flat, resume=True)


@pytest.mark.parametrize("flags", [dict(uniform_l1=True), dict(use_weights=False), dict(bag_of_words=True),
                                   dict(use_augmentation=False)])
def test_ablations_train(tiny_wp, tmp_path, flags):
    ds, wp, _ = tiny_wp
    result = Trainer(tiny_config(tmp_path / "r", **flags), ds, wp).train()
    assert len(result["history"]) == 2


def test_presets_follow_the_paper():
    nq = TrainConfig.for_dataset("nq")
    assert (nq.lr, nq.batch_size, nq.lam, nq.epochs, nq.hard_negatives) == (3e-4, 144, 0.1, 45, 1)
    mm = TrainConfig.for_dataset("msmarco", epochs=1)
    assert (mm.lr, mm.lam, mm.hard_negatives, mm.epochs) == (3e-5, 0.025, 4, 1)
    # SciFact differs from the other small sets only in its epochs and random negatives; an override still wins.
    scifact, nfcorpus = TrainConfig.for_dataset("scifact"), TrainConfig.for_dataset("nfcorpus")
    assert (scifact.epochs, nfcorpus.epochs, TrainConfig.for_dataset("scifact", epochs=6).epochs) == (20, 6, 6)
    assert (scifact.random_negatives, nfcorpus.random_negatives) == (1024, 0)
    assert {**vars(scifact), "epochs": 6, "random_negatives": 0, "dataset": "nfcorpus"} == vars(nfcorpus)


@pytest.mark.parametrize("bad", [dict(gate_quantile=1.5), dict(pseudo_queries=-1), dict(random_negatives=-1),
                                 dict(aug_threshold=-0.1),
                                 dict(negatives="mined"), dict(ema_decay=1.0),
                                 dict(significance=1.5), dict(flops=-1.0), dict(distill_weight=-1.0),
                                 dict(teacher="no/such/run"), dict(encoder_layers=7), dict(aug_layer=7),
                                 dict(aug_init="tied")])
def test_bad_settings_fail_before_anything_is_written(tiny_wp, tmp_path, bad):
    ds, wp, _ = tiny_wp
    with pytest.raises(UserError, match="fix:"):
        Trainer(tiny_config(tmp_path / "bad", **bad), ds, wp)
    assert not (tmp_path / "bad").exists()


def test_off_positive_penalty_charges_terms_outside_the_relevant_documents(tiny_wp, tmp_path):
    """An a(q) entry is 'relevant' exactly when its flat term occurs in one of the query's judged
    documents; every other entry costs at least the off-positive penalty."""
    import torch

    from bm25aug.lucene.analysis import analyze

    ds, _, flat = tiny_wp
    trainer = Trainer(tiny_config(tmp_path / "r", target="flat", weight_floor=1.0, off_positive_penalty=1.0), ds, flat)
    batch = trainer.examples[:3]
    relevant = trainer._relevant(trainer.corpora[0], batch)
    fmap = trainer.target.map
    for example, row in zip(batch, relevant):
        judged = [d for d, g in ds.split("train").qrels[example.qid].items() if g > 0]
        found = set().union(*(analyze(ds.corpus[d].contents) for d in judged))
        expected = {int(v) for v, t in zip(fmap.vocab_ids, fmap.term_ids) if fmap.terms[t] in found}
        assert set(torch.nonzero(row).flatten().tolist()) == expected and expected
    loss, vocab = trainer.corpora[0].loss, trainer.model.tokenizer.get_vocab()
    inside = int(torch.nonzero(relevant[0])[0])
    outside = vocab["galaxies"] if not relevant[0, vocab["galaxies"]] else vocab["sparrows"]
    scores, targets, mask = torch.zeros(1, 1), torch.zeros(1, dtype=torch.long), torch.zeros(1, 1, dtype=torch.bool)
    for entry, cost in ((inside, float(loss.penalty[inside])), (outside, 1.0)):
        a = torch.zeros(1, len(vocab))
        a[0, entry] = 1.0
        assert float(loss(a, scores, targets, mask, relevant[:1])["reg"]) == pytest.approx(cost)
    assert float(loss.penalty[inside]) < 1.0


def test_weight_average_is_what_dev_checks_and_best_see_and_it_resumes(tiny_wp, tmp_path):
    """With --ema-decay, best/ holds the averaged weights (last/ the raw ones, to resume from), and a
    resumed run continues the same average."""
    import torch

    from bm25aug.model.augmenter import QueryAugmenter

    ds, wp, _ = tiny_wp
    out = tmp_path / "ema"
    trainer = Trainer(tiny_config(out, ema_decay=0.9), ds, wp)
    trainer.train()  # one epoch: best/ is that epoch's check
    best, last = (dict(QueryAugmenter.from_pretrained(out / d).named_parameters()) for d in ("best", "last"))
    assert all(torch.equal(best[n], trainer.callback(WeightAverage).shadow[n]) for n in best)
    assert not all(torch.equal(best[n], last[n]) for n in best)
    resumed = Trainer(tiny_config(out, ema_decay=0.9, epochs=2), ds, wp, resume=True)
    resumed._load_state()
    assert resumed.callback(WeightAverage).updates == trainer.callback(WeightAverage).updates
    assert all(torch.equal(resumed.callback(WeightAverage).shadow[n], trainer.callback(WeightAverage).shadow[n]) for n in best)


def test_flops_charges_one_word_proposed_for_every_query_more_than_distinct_words(tiny_wp, tmp_path):
    """Same L1 mass, four queries: one word shared by all costs 4x the FLOPS of four distinct words."""
    import torch

    ds, _, flat = tiny_wp
    loss = Trainer(tiny_config(tmp_path / "f", target="flat", weight_floor=1.0, flops=1.0), ds, flat).corpora[0].loss
    vocab = len(loss.penalty)
    scores, targets, mask = torch.zeros(4, 4), torch.arange(4), torch.zeros(4, 4, dtype=torch.bool)
    shared, distinct = torch.zeros(4, vocab), torch.zeros(4, vocab)
    shared[:, 2000] = 0.5
    distinct[torch.arange(4), torch.tensor([2000, 2001, 2002, 2003])] = 0.5
    got = {name: loss(a, scores, targets, mask) for name, a in (("shared", shared), ("distinct", distinct))}
    assert float(got["shared"]["flops"]) == pytest.approx(0.25)
    assert float(got["distinct"]["flops"]) == pytest.approx(0.0625)
    rank = float(got["shared"]["rank"])
    assert float(got["shared"]["loss"]) == pytest.approx(rank + 0.1 * float(got["shared"]["reg"]) + 0.25)


def test_a_model_that_does_not_beat_bm25_on_dev_is_served_as_plain_bm25(tiny_wp, tmp_path):
    """At a significance level no tiny run can reach, best/ becomes plain BM25 (w ≡ 1, a ≡ 0): its
    term lists are the query's own flat terms, and selection.json says why."""
    from bm25aug.model.augmenter import QueryAugmenter
    from bm25aug.search.bm25 import BM25Searcher

    ds, _, flat = tiny_wp
    out = tmp_path / "plain"
    Trainer(tiny_config(out, target="flat", weight_floor=1.0, significance=1e-12), ds, flat).train()
    selection = json.loads((out / "selection.json").read_text())
    assert not selection["kept"] and selection["p_value"] >= 1e-12 and selection["metric"] == "ndcg@10"
    model = QueryAugmenter.from_pretrained(out / "best")
    assert not model.config.use_weights and not model.config.use_augmentation
    searcher = BM25Searcher(flat)
    for query in ("cats and a mat", "dogs barking at the mailman"):
        assert model.encode(query) == searcher.query_terms(query)
    Trainer(tiny_config(tmp_path / "off", target="flat", weight_floor=1.0, significance=0.0), ds, flat).train()
    assert not (tmp_path / "off" / "selection.json").exists()


def test_a_student_learns_to_match_its_teachers_scores(tiny_wp, tmp_path):
    """--teacher: the teacher's scores of each batch, as it serves its queries, join the loss as
    the KL divergence of the two softmaxes over the same documents (masked ones left out): zero
    when the student scores as the teacher does. A smaller encoder trains that way end to end; a
    teacher for another target is a one-line error."""
    import torch

    from bm25aug.model.augmenter import QueryAugmenter

    ds, wp, flat = tiny_wp
    teacher = tmp_path / "teacher"
    Trainer(tiny_config(teacher, target="flat", weight_floor=1.0), ds, flat).train()
    student = Trainer(tiny_config(tmp_path / "student", target="flat", weight_floor=1.0, encoder_layers=0,
                                  teacher=str(teacher), distill_weight=0.5), ds, flat)
    loss = student.corpora[0].loss
    scores, targets = torch.tensor([[3.0, 1.0, 0.0], [0.0, 2.0, 5.0]]), torch.tensor([0, 1])
    mask = torch.tensor([[False, False, True], [False, False, False]])
    a = torch.zeros(2, len(loss.penalty))
    assert float(loss(a, scores, targets, mask, teacher_scores=scores)["distill"]) == pytest.approx(0.0, abs=1e-6)
    other = scores.clone()
    other[0, 2] = 99.0  # a masked document: not part of the divergence
    assert float(loss(a, scores, targets, mask, teacher_scores=other)["distill"]) == pytest.approx(0.0, abs=1e-6)
    other[1] = torch.tensor([4.0, 0.0, 0.0])
    parts = loss(a, scores, targets, mask, teacher_scores=other)
    plain = loss(a, scores, targets, mask)
    assert float(parts["distill"]) > 0.1
    assert float(parts["loss"]) == pytest.approx(float(plain["loss"]) + 0.5 * float(parts["distill"]))
    student.train()
    log = [json.loads(line) for line in (tmp_path / "student" / "log.jsonl").read_text().splitlines()]
    assert log[1]["train_distill"] > 0
    assert len(QueryAugmenter.from_pretrained(tmp_path / "student" / "last").encoder.encoder.layer) == 0
    with pytest.raises(UserError, match="--teacher"):
        Trainer(tiny_config(tmp_path / "wp", teacher=str(teacher)), ds, wp)


def test_centered_init_is_centered_on_the_training_queries(tiny_wp, tmp_path):
    """--aug-init centered: a fresh run centers the a(q) head on its own training queries (the
    default tied init leaves every bias at -1); a resumed run keeps its trained head."""
    import torch

    ds, wp, _ = tiny_wp
    plain = Trainer(tiny_config(tmp_path / "plain"), ds, wp).model.aug_head.bias
    assert torch.all(plain == -1.0)
    out = tmp_path / "centered"
    trainer = Trainer(tiny_config(out, aug_init="centered"), ds, wp)
    expected = trainer.model.aug_head.bias.detach().clone()
    reference = type(trainer.model).from_encoder(target="wp", weight_floor=0.0, aug_init="centered")
    reference.center_aug_head([e.query for e in trainer.examples])
    assert torch.allclose(expected, reference.aug_head.bias, atol=1e-5) and expected.std() > 0.01
    trainer.train()
    resumed = Trainer(tiny_config(out, aug_init="centered", epochs=2), ds, wp, resume=True)
    assert torch.equal(resumed.model.aug_head.bias, trainer.model.aug_head.bias)


def test_random_negatives_price_added_words_found_outside_the_batch(tiny_wp, tmp_path):
    """--random-negatives R: each step also scores R distinct corpus documents for every query of the
    batch (a query's own positives among them masked), so a word a(q) adds that only such a document
    holds now raises the ranking loss; without them it costs nothing there."""
    import random

    import torch

    ds, _, flat = tiny_wp
    trainer = Trainer(tiny_config(tmp_path / "r", target="flat", weight_floor=1.0, random_negatives=8), ds, flat)
    seen = {}
    score = trainer.compute_loss

    def spy(corpus, qb, w, a, rows, mask, relevant=None):
        seen.update(rows=list(rows), mask=mask)
        return score(corpus, qb, w, a, rows, mask, relevant)

    trainer.compute_loss = spy
    batch = trainer.examples[:2]
    trainer.training_step(batch, random.Random(0))
    rows, mask = seen["rows"], seen["mask"]
    assert len(rows) == 2 + 2 + 8 and sorted(rows[4:]) == list(range(8))  # all 8 documents, once each
    for i, example in enumerate(batch):
        drawn = [j for j in range(4, len(rows)) if rows[j] in trainer.corpora[0].qrels_rows[example.qid]]
        assert drawn and all(mask[i, j] for j in drawn)

    example = batch[0]
    doc, word = ("d7", "sparrows") if example.qid == "q6" else ("d6", "galaxies")  # not the query's positive
    holder = trainer.corpora[0].bm25.rows([doc])
    others = [r for r in range(8) if r not in example.positives + holder]
    vocab = trainer.model.tokenizer.get_vocab()
    qb = trainer.target.batch([example.query])

    def gradient(rows: list[int]) -> float:
        """d(ranking loss)/d(a of the word) when the query adds it, its positive scored first."""
        a = torch.zeros(1, len(vocab))
        a[0, vocab[word]] = 0.5
        a.requires_grad_(True)
        boosts = trainer.target.boosts(qb, torch.ones(1, qb.input_ids.shape[1]), a, trainer.corpora[0].cmap)
        scores = trainer.corpora[0].bm25.score(boosts, example.positives[:1] + rows)
        trainer.corpora[0].loss(a, scores, torch.zeros(1, dtype=torch.long), torch.zeros_like(scores, dtype=torch.bool))[
            "loss"].backward()
        return float(a.grad[0, vocab[word]])

    penalty_only = gradient(others[:1])
    assert gradient(others[:1] + holder) > penalty_only  # the document that holds the word now counts


def test_random_draws_are_the_same_documents_whatever_order_the_index_was_built_in(tiny_wp, tmp_path):
    """A seed must draw the same random negatives from every build of an index: a multi-threaded
    build numbers documents differently each time, and drawing Lucene doc numbers made a fresh
    clone train a different default model."""
    import random

    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index
    from conftest import TINY_DOCS, write_beir

    ds, _, flat = tiny_wp
    reversed_ds = load_dataset(str(write_beir(tmp_path / "tiny", docs=dict(reversed(TINY_DOCS.items())))))
    reversed_flat = ensure_index(reversed_ds, "flat", tmp_path / "indexes")
    drawn = []
    for name, (dataset, index) in {"a": (ds, flat), "b": (reversed_ds, reversed_flat)}.items():
        trainer = Trainer(tiny_config(tmp_path / name, target="flat", random_negatives=3), dataset, index)
        seen = {}
        score = trainer.compute_loss

        def spy(corpus, qb, w, a, rows, mask, relevant=None, score=score, seen=seen):
            seen["rows"] = list(rows)
            return score(corpus, qb, w, a, rows, mask, relevant)

        trainer.compute_loss = spy
        trainer.training_step(trainer.examples[:2], random.Random(0))
        drawn.append((list(trainer.corpora[0].bm25.docids), [trainer.corpora[0].bm25.docids[r] for r in seen["rows"]]))
    (numbering_a, docs_a), (numbering_b, docs_b) = drawn
    assert numbering_a != numbering_b  # the two builds do number the documents differently
    assert docs_a == docs_b


def test_init_from_starts_from_a_trained_models_weights(tiny_wp, tmp_path):
    """--init-from: the run starts from the trained model (not the pretrained encoder), keeps its
    shape, trains on, and refuses a model for another target, a model setting of its own (the
    model brings its own) and being its own output folder."""
    import torch

    from bm25aug.model.augmenter import QueryAugmenter

    ds, wp, flat = tiny_wp
    base = tmp_path / "base"
    Trainer(tiny_config(base, target="flat", weight_floor=1.0, encoder_layers=2), ds, flat).train()
    start = QueryAugmenter.from_pretrained(base / "best")
    tuned = Trainer(tiny_config(tmp_path / "tuned", target="flat", weight_floor=1.0, init_from=str(base)), ds, flat)
    assert len(tuned.model.encoder.encoder.layer) == 2  # the trained model's shape, not the 6-layer default
    assert all(torch.equal(a, b) for a, b in zip(start.state_dict().values(), tuned.model.state_dict().values()))
    tuned.train()
    after = QueryAugmenter.from_pretrained(tmp_path / "tuned" / "last")
    assert any(not torch.equal(a, b) for a, b in zip(start.state_dict().values(), after.state_dict().values()))
    with pytest.raises(UserError, match="--init-from"):
        Trainer(tiny_config(tmp_path / "wp", init_from=str(base)), ds, wp)
    with pytest.raises(UserError, match="sets --encoder-layers 1 .* a model setting"):
        Trainer(tiny_config(tmp_path / "x", target="flat", init_from=str(base), encoder_layers=1), ds, flat)
    with pytest.raises(UserError, match="--init-from"):
        Trainer(tiny_config(base, target="flat", weight_floor=1.0, init_from=str(base)), ds, flat)


def test_learned_feedback_trains_on_each_examples_rm3_terms(tmp_path):
    """Each training query carries the feedback search would give it; best/ keeps the setting.
    (RM3 keeps terms in at most 10% of the documents: filler documents make the tiny ones rare.)"""
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index
    from bm25aug.model.augmenter import QueryAugmenter
    from bm25aug.search.feedback import FeedbackTerms

    from conftest import TINY_DOCS, write_beir

    filler = {f"f{i}": ("Filler", f"an unrelated note, number {i}") for i in range(40)}
    ds = load_dataset(str(write_beir(tmp_path / "tiny", docs={**TINY_DOCS, **filler})))
    flat = ensure_index(ds, "flat", tmp_path / "indexes")
    out = tmp_path / "fb"
    trainer = Trainer(tiny_config(out, target="flat", weight_floor=1.0, feedback_terms=5), ds, flat)
    feedback = FeedbackTerms(trainer.corpora[0].searcher, 5, trainer.model.tokenizer)
    assert [e.feedback for e in trainer.examples] == feedback.texts([e.query for e in trainer.examples])
    assert any(e.feedback for e in trainer.examples)
    read, forward = [], trainer.model.forward

    def spy(input_ids, attention_mask, **kw):  # what the encoder is given in training
        read.append((input_ids == trainer.model.tokenizer.sep_token_id).sum(1))
        return forward(input_ids, attention_mask, **kw)

    trainer.model.forward = spy
    trainer.train()
    assert read and max(int(n.max()) for n in read) == 2, "the training steps read each query's feedback"
    best = QueryAugmenter.from_pretrained(out / "best")
    assert best.config.feedback_terms == 5 and best.config.aug_gate >= 1
    assert "reads the top 5 RM3 terms" in (out / "best" / "README.md").read_text()
