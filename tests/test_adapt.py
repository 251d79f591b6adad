"""``bm25aug adapt`` on a tiny corpus: it writes a loadable folder with its card, the label-free gate
serves plain BM25 when the teacher prefers BM25's own order, bad input is one line, and the adapted
folder's term lists are the same through AugmentedSearcher and export."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from bm25aug.errors import UserError


def _args(*argv: str) -> argparse.Namespace:
    from bm25aug.adapt import command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    return parser.parse_args(list(argv))


def _adapt(tiny_wp, out, *extra: str) -> None:
    from bm25aug.adapt import command

    ds, _, flat = tiny_wp
    command.run(_args("--dataset", str(ds.path), "--output-dir", str(out), "--index-root", str(flat.parent),
                      "--queries", "6", "--dev-queries", "2", "--epochs", "2", "--batch-size", "4", "--threads", "1",
                      *extra))


class BM25OrderTeacher:
    """A teacher that scores each list in the order it is given (BM25's, for candidates and pools alike)."""

    name = "test: BM25's own order"
    encode_seconds = 0.0

    def scores(self, queries, rows):
        return [-np.arange(len(r), dtype=np.float32) for r in rows]


class ReverseTeacher(BM25OrderTeacher):
    name = "test: BM25's order reversed"

    def scores(self, queries, rows):
        return [np.arange(len(r), dtype=np.float32) for r in rows]


def test_adapt_writes_a_loadable_folder_with_its_card(tiny_wp, tmp_path):
    from bm25aug.model.loading import load_model
    from bm25aug.search.augmented import AugmentedSearcher

    _adapt(tiny_wp, tmp_path / "run", "--query-side", "static", "--significance", "0")
    best = tmp_path / "run" / "best"
    assert load_model(best).config.query_side == "static"
    card = (best / "README.md").read_text()
    assert "## Adaptation" in card and "pseudo-queries of kind `sentence`" in card and "all-MiniLM-L6-v2" in card
    info = json.loads((tmp_path / "run" / "adapt.json").read_text())
    assert set(info["cost"]) == {"index", "pseudo-queries", "teacher: corpus encoding", "gate judgements", "train"}
    assert info["train_queries"] == 6 and 1 <= info["dev_queries"] <= 2
    hits = AugmentedSearcher.from_pretrained(best, tiny_wp[2]).search("the cat sat on the mat", k=3)
    assert hits and hits[0].docid == "d1"


def test_the_default_student_is_contextual_and_init_from_starts_from_a_folder(tiny_wp, tmp_path, monkeypatch):
    """No --query-side: the contextual model; --init-from that folder starts the next run from it and
    keeps its side; a setting only the static side has is refused."""
    from bm25aug.model.loading import load_model

    monkeypatch.setattr("bm25aug.adapt.teacher.make_teacher", lambda name, index: ReverseTeacher())
    _adapt(tiny_wp, tmp_path / "first", "--significance", "0")
    first = load_model(tmp_path / "first" / "best")
    assert first.config.query_side == "contextual"
    info = json.loads((tmp_path / "first" / "adapt.json").read_text())
    assert info["start"] == "the pretrained encoder"
    _adapt(tiny_wp, tmp_path / "second", "--significance", "0", "--init-from", str(tmp_path / "first" / "best"))
    second = load_model(tmp_path / "second" / "best")
    assert second.config.query_side == "contextual"
    assert json.loads((tmp_path / "second" / "adapt.json").read_text())["start"] == str(tmp_path / "first" / "best")
    with pytest.raises(UserError, match="--table-lr"):
        _adapt(tiny_wp, tmp_path / "third", "--table-lr", "0.2")
    with pytest.raises(UserError, match=r"adapt settings that differ from the saved run \(--mix 0.5 then, 0.25 now\)"):
        _adapt(tiny_wp, tmp_path / "first", "--significance", "0", "--mix", "0.25", "--resume")
    (tmp_path / "first" / "adapt_settings.json").write_text("{not json")
    with pytest.raises(UserError, match="adapt_settings.json is damaged"):
        _adapt(tiny_wp, tmp_path / "first", "--significance", "0", "--resume")


def test_the_gates_run_leaves_out_the_pseudo_querys_own_document():
    """Its judgements leave the source document out, so its run must too: unjudged and first for BM25,
    it would count against every run."""
    from types import SimpleNamespace

    from bm25aug.adapt.trainer import AdaptTrainer
    from bm25aug.search.bm25 import Hit

    hits = [Hit("d7", 9.0), Hit("d2", 5.0), Hit("d3", 1.0)]
    corpus = SimpleNamespace(searcher=SimpleNamespace(hits=lambda top: hits))
    assert [h.docid for h in AdaptTrainer.dev_hits(None, corpus, "adapt:d7", None)] == ["d2", "d3"]
    assert AdaptTrainer.dev_hits(None, corpus, "adapt:d9", None) == hits


def test_the_gate_serves_plain_bm25_when_the_teacher_prefers_bm25(tiny_wp, tmp_path, monkeypatch):
    from bm25aug.model.loading import load_model

    monkeypatch.setattr("bm25aug.adapt.teacher.make_teacher", lambda name, index: BM25OrderTeacher())
    _adapt(tiny_wp, tmp_path / "run", "--query-side", "static")
    model = load_model(tmp_path / "run" / "best")
    assert not model.config.use_weights and not model.config.use_augmentation
    selection = json.loads((tmp_path / "run" / "selection.json").read_text())
    assert not selection["kept"] and selection["model"] <= selection["bm25"] + 1e-9
    assert "served as plain BM25" in (tmp_path / "run" / "best" / "README.md").read_text()


def test_the_adapted_term_lists_are_exports(tiny_wp, tmp_path, monkeypatch):
    """AugmentedSearcher searches the term lists `bm25aug export` writes for the adapted folder."""
    from bm25aug.model.export import export_term_lists
    from bm25aug.model.loading import load_encoder
    from bm25aug.search.augmented import AugmentedSearcher

    monkeypatch.setattr("bm25aug.adapt.teacher.make_teacher", lambda name, index: ReverseTeacher())
    _adapt(tiny_wp, tmp_path / "run", "--query-side", "static", "--significance", "0", "--table-lr", "0.2")
    best = tmp_path / "run" / "best"
    ds, _, flat = tiny_wp
    queries = ds.split("test").queries
    export_term_lists(load_encoder(best, "onnx-int8"), queries, tmp_path / "q.jsonl")
    exported = {r["id"]: r["vector"] for r in map(json.loads, (tmp_path / "q.jsonl").read_text().splitlines())}
    searcher = AugmentedSearcher.from_pretrained(best, flat)
    lists = {qid: searcher.term_list(q) for qid, q in queries.items()}
    assert {qid: searcher.bm25.indexed(exported[qid]) for qid in queries} == lists
    assert any(lists[q] != searcher.bm25.query_terms(t) for q, t in queries.items())  # it learned something


@pytest.mark.parametrize("argv, says", [
    ([], "exactly one of --dataset NAME, --corpus FILE, --index DIR"),
    (["--dataset", "scifact", "--corpus", "x.jsonl"], "--dataset and --corpus was given"),
    (["--corpus", "docs.txt"], "is not a file"),
    (["--dataset", "scifact", "--kind", "poems"], "--kind 'poems' is unknown"),
    (["--dataset", "scifact", "--queries", "0"], "--queries must be at least 1"),
    (["--dataset", "scifact", "--loss", "hinge"], "--loss 'hinge' is unknown"),
])
def test_bad_input_is_one_line(tmp_path, argv, says):
    from bm25aug.adapt import command

    with pytest.raises(UserError) as e:
        command.run(_args(*argv, "--output-dir", str(tmp_path / "out")))
    assert says in str(e.value) and "fix:" in str(e.value) and "\n" not in str(e.value)


def test_a_corpus_file_of_another_kind_is_one_line(tmp_path):
    from bm25aug.adapt.source import file_layout

    (tmp_path / "docs.tsv").write_text("just one field\n")
    with pytest.raises(UserError, match="first line has 1 tab-separated field"):
        file_layout(tmp_path / "docs.tsv")
    (tmp_path / "docs.txt").write_text("x\n")
    with pytest.raises(UserError, match="not a corpus file"):
        file_layout(tmp_path / "docs.txt")
    (tmp_path / "c.tsv").write_text("7\tsome text\n")
    assert file_layout(tmp_path / "c.tsv") == "msmarco"


def test_pseudo_query_kinds():
    from collections import Counter

    from bm25aug.adapt.queries import PREFIX, keyphrase, make_queries
    from bm25aug.data.corpus import Document

    corpus = {f"d{i}": Document(f"Title {i}", f"Alpha beta gamma delta number{i} epsilon zeta. Tiny.")
              for i in range(6)}
    for kind in ("sentence", "title", "keyphrase", "span", "mix"):
        made = make_queries(corpus, kind, 4, seed=1)
        assert len(made) == 4 and all(q.startswith(PREFIX) and q[len(PREFIX):] in corpus for q in made)
    assert make_queries(corpus, "title", 2, seed=1, skip={"d0", "d1", "d2", "d3"}).keys() <= {"adapt:d4", "adapt:d5"}
    df = Counter({"": 6, "alpha": 6, "beta": 6, "gamma": 6, "delta": 6, "epsilon": 6, "zeta": 6, "title": 6})
    assert "number3" in keyphrase(corpus["d3"], df).split()


def test_a_corpus_file_and_a_stock_index_are_read(tmp_path):
    """--corpus FILE (here MS MARCO's collection.tsv) is indexed under its folder's name and its
    fingerprint, and --index reads the documents an index stores."""
    from bm25aug.adapt.source import resolve

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "collection.tsv").write_text("1\tThe cat sat on the mat and purred.\n2\tA dog barked all morning.\n")
    source = resolve(None, str(folder / "collection.tsv"), None, index_root=str(tmp_path / "indexes"))
    assert source.name.startswith("mine-") and source.index == tmp_path / "indexes" / f"{source.name}.flat"
    assert source.corpus["1"].text == "The cat sat on the mat and purred."
    stock = resolve(None, None, str(source.index))
    assert len(stock.corpus) == 2 and "dog barked" in stock.corpus["2"].text
    assert {d for d, _ in stock.corpus.items()} == {"1", "2"}


def test_the_teacher_reads_a_stock_beir_documents_title_and_text():
    """A stock index may store BEIR's ``{"_id", "title", "text"}``, not ``contents``: the teacher encodes
    what adapt's pseudo-queries read, not an empty string."""
    from bm25aug.dense.corpus_cache import contents_text as contents

    assert contents('{"_id": "d1", "title": "Aspirin", "text": "lowers fever"}') == "Aspirin lowers fever"
    assert contents('{"id": "d1", "contents": "Aspirin lowers fever"}') == "Aspirin lowers fever"
