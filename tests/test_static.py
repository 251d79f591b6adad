"""The static query side (``--query-side static``): a learned table, no encoder at query time.

Its promises, each checked here: the chunked analysis it reads a flat query with gives bm25-flat's
own terms; what training scores in torch is what search sends; untrained it is plain BM25; and a
saved model gives the same term lists and hits through ``AugmentedSearcher``, export, the CLI and
the server.
"""

import json
import pytest
import torch

from bm25aug.model.loading import load_model
from conftest import write_beir
from test_reliability import run_cli


def _static(target="flat", **config):
    from bm25aug.model.static import StaticQueryModel

    return StaticQueryModel.from_tokenizer(target=target, **config)


@pytest.mark.realdata
def test_chunked_analysis_gives_the_analyzers_own_terms(data_dir):
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.analysis import analyze, analyze_chunks

    queries = []
    for name in ("scifact", "nfcorpus", "squad", "squadshifts-reddit"):
        split = load_dataset(name, data_dir).split("test")
        queries += list(split.queries.values())
    queries += ["U.S.A.\u00a0e-mail 1,000.5 don't\tcats' O'Neil\u2003x\u200by", "  ", "ÉCOLE naïve café", "🙂 emoji🙂ok"]
    assert [analyze_chunks(q) for q in queries] == [analyze(q) for q in queries]


@pytest.mark.parametrize("target,budget", [("flat", 0), ("wp", 0), ("flat", 1), ("wp", 1)])
def test_what_training_scores_is_what_search_sends(tiny_wp, target, budget):
    """Also with an added-term budget: torch keeps the same heaviest added terms that search sends."""
    from bm25aug.model.targets import ColumnMap
    from bm25aug.train.torch_bm25 import TorchBM25

    ds, wp, flat = tiny_wp
    model = _static(target, weight_floor=0.0, added_budget=budget)
    queries = list(ds.split("train").queries.values()) + ["cat cat mat dog"]
    occurrences = [model.occurrences(q) for q in queries]
    added = [{"tiger": 1.0, "garden": 0.5, "cat": 2.0}] * len(queries)
    model.fit_table(occurrences, added, size=2)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        model.theta.copy_(torch.rand(len(model.theta), generator=g) * 3 - 0.5)
        model.values.copy_(torch.rand(len(model.values), generator=g) - 0.3)
    index = flat if target == "flat" else wp
    bm25 = TorchBM25(index, model.tokenizer.get_vocab() if target == "wp" else None)
    cmap = model.target.columns(bm25)
    boosts, _ = model.column_boosts(occurrences, cmap)
    lists = model.encode_batch(queries)
    boosts = boosts.detach()
    for i, terms in enumerate(lists):
        want = {t: float(boosts[i, c]) for t, c in cmap.columns.items() if boosts[i, c] > 0}
        assert {t: w for t, w in terms.items() if t in cmap.columns} == pytest.approx(want, rel=1e-6)
    assert any(t not in set(o) for terms, o in zip(lists, occurrences) for t in terms)  # it did add terms
    if budget:
        assert max(len(set(terms) - set(o)) for terms, o in zip(lists, occurrences)) == budget


def test_an_untrained_table_is_plain_bm25(tiny_wp):
    from bm25aug.search.bm25 import BM25Searcher

    ds, _, flat = tiny_wp
    model = _static()
    queries = list(ds.split("test").queries.values()) + ["cats' U.S. e-mail 1,000"]
    model.fit_table([model.occurrences(q) for q in queries], [{} for _ in queries], size=8)
    searcher = BM25Searcher(flat)
    for q in queries:
        assert model.encode(q) == searcher.query_terms(q)


def test_a_saved_model_ranks_alike_everywhere(tiny_wp, tmp_path):
    """AugmentedSearcher, export, the CLI and the server: the same term lists and hits."""
    from bm25aug.search.augmented import AugmentedSearcher

    ds, _, flat = tiny_wp
    model = _static()
    queries = ds.split("test").queries
    model.fit_table([model.occurrences(q) for q in queries.values()], [{"tiger": 1.0, "sing": 1.0}] * len(queries), 3)
    with torch.no_grad():
        model.theta.uniform_(0.5, 2.5)
        model.values.uniform_(-0.2, 0.8)
    model.save_pretrained(tmp_path / "static")
    loaded = load_model(tmp_path / "static")
    assert [loaded.encode(q) for q in queries.values()] == [model.encode(q) for q in queries.values()]
    searcher = AugmentedSearcher.from_pretrained(tmp_path / "static", flat)
    alone = {qid: [(h.docid, h.score) for h in searcher.search(q, k=5)] for qid, q in queries.items()}
    batch = searcher.batch_search(list(queries.values()), list(queries), k=5, threads=2)
    assert {q: [(h.docid, h.score) for h in hits] for q, hits in batch.items()} == alone
    # export writes the term lists AugmentedSearcher searches
    out = run_cli("-m", "bm25aug.cli", "export", "--checkpoint", str(tmp_path / "static"), "--dataset", str(ds.path),
                  "--split", "test", "--output", str(tmp_path / "q.jsonl"), "--index-root", str(flat.parent))
    assert out.returncode == 0, out.stderr
    exported = {r["id"]: r["vector"] for r in map(json.loads, (tmp_path / "q.jsonl").read_text().splitlines())}
    assert {qid: searcher.bm25.indexed(exported[qid]) for qid in queries} == \
        {qid: searcher.term_list(q) for qid, q in queries.items()}
    # the CLI's run equals the searcher's hits
    tsv = tmp_path / "q.tsv"
    tsv.write_text("".join(f"{qid}\t{q}\n" for qid, q in queries.items()))
    out = run_cli("-m", "bm25aug.cli", "search", "--index", str(flat), "--model", str(tmp_path / "static"),
                  "--queries", str(tsv), "--k", "5")
    assert out.returncode == 0, out.stderr
    run = {}
    for line in out.stdout.splitlines():
        qid, _, docid, _, score, _ = line.split()
        run.setdefault(qid, []).append((docid, float(score)))
    assert {q: [(d, pytest.approx(s, abs=1e-4)) for d, s in hits] for q, hits in alone.items()} == run


def test_static_refuses_encoder_settings():
    from bm25aug.errors import UserError
    from bm25aug.train.arguments import TrainConfig

    for bad in ({"encoder_layers": 2}, {"feedback_terms": 5}, {"aug_init": "centered"}, {"head_lr": 0.05}):
        with pytest.raises(UserError, match="--query-side static has no encoder"):
            TrainConfig(query_side="static", **bad)


def test_the_server_serves_a_static_model_as_the_searcher_does(tiny_wp, tmp_path):
    import asyncio

    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.serve.config import IndexSpec, ServeConfig
    from bm25aug.serve.service import SearchService

    ds, _, flat = tiny_wp
    model = _static()
    queries = list(ds.split("test").queries.values())
    model.fit_table([model.occurrences(q) for q in queries], [{"tiger": 1.0, "sing": 1.0}] * len(queries), 3)
    with torch.no_grad():
        model.values.uniform_(0.1, 0.8)
    model.save_pretrained(tmp_path / "static")
    searcher = AugmentedSearcher.from_pretrained(tmp_path / "static", flat)
    service = SearchService(ServeConfig(indexes=[IndexSpec("t", str(flat), str(tmp_path / "static"))], threads=1))

    async def ask():
        answers = await asyncio.gather(*(service.search("t", q, 5) for q in queries))  # micro-batched together
        terms = [await service.augment("t", q) for q in queries]
        return answers, terms

    try:
        answers, terms = asyncio.run(ask())
    finally:
        service.close()
    for q, answer, augmented in zip(queries, answers, terms):
        assert [(c["docid"], c["score"]) for c in answer["candidates"]] == \
            [(h.docid, h.score) for h in searcher.search(q, k=5)]
        assert augmented["terms"] == searcher.term_list(q)


def test_a_teacher_gives_the_static_table_its_candidates(tmp_path, flat_model):
    """``--teacher``: the lists are the terms the teacher adds, and the teacher's scores are learned too."""
    from bm25aug.cli import main

    root = write_beir(tmp_path / "tiny")
    flat_model.save_pretrained(tmp_path / "teacher")
    teacher = load_model(tmp_path / "teacher")
    assert main(["train", "--dataset", str(root), "--output-dir", str(tmp_path / "run"), "--index-root",
                 str(tmp_path / "idx"), "--batch-size", "4", "--dev-size", "2", "--negative-depth", "3", "--threads",
                 "1", "--epochs", "1", "--significance", "0", "--query-side", "static", "--teacher",
                 str(tmp_path / "teacher")]) == 0
    model = load_model(tmp_path / "run" / "best")
    texts = [json.loads(line)["text"] for line in (root / "queries.jsonl").read_text().splitlines()]
    taught = {u for terms in teacher.encode_batch(texts) for u in terms}
    assert model.targets and set(model.targets) <= taught
    assert "distill" in (tmp_path / "run" / "log.jsonl").read_text()
