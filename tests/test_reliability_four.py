"""Reliability, round four (issue 49; the probe's report is ../shared/notes/probe-round4.md).

A term list is searched exactly as given, on every path: Lucene gets one clause per term, that
term and that float32 boost, built as a structure (never text read back by a parser), or the list
is refused in one line, the same way everywhere (W16, W23, PY1, C17). Query ids are valid Unicode
(C14, C15). Training, models and adapt refuse what they cannot do before any work (ST5, ST7,
ST13, A9-A14, A21, A22, A25). A slow reader cannot hold the server's memory, and a connection
refused at the cap reads its 503 (SV3, SV4). A body the server cannot read is a 400 with its fix
(W21)."""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bm25aug.errors import UserError
from bm25aug.limits import MAX_CLAUSES, MAX_TERM_WEIGHT
from bm25aug.search.term_lists import MAX_TERM_BYTES, check_term_list
from test_reliability import run_cli
from test_serve_hardening import InThread, json_error, read_all, request, until
from test_serve_terms import post

CANCER = {"cancer": 1.0}
MIN_TERM_WEIGHT = 2.0 ** -126  # float32's smallest normal number: bm25aug.limits.MIN_TERM_WEIGHT


@pytest.fixture(scope="module")
def searcher(scifact_flat):
    from bm25aug.search.bm25 import BM25Searcher

    return BM25Searcher(scifact_flat)


@pytest.fixture(scope="module")
def service(scifact_flat):
    from bm25aug.serve.config import IndexSpec, ServeConfig
    from bm25aug.serve.service import SearchService

    service = SearchService(ServeConfig(indexes=[IndexSpec("s", str(scifact_flat))], workers=1))
    yield service
    service.close()


def clauses_of(query) -> list[tuple[str, str, float]]:
    """(field, term, boost) of each clause of a weighted query Lucene runs, read from the structure."""
    from jnius import cast

    out, clauses = [], query.clauses()
    for i in range(clauses.size()):
        boosted = cast("org.apache.lucene.search.BoostQuery", clauses.get(i).query)  # a record: pyjnius reads its field
        term = cast("org.apache.lucene.search.TermQuery", boosted.getQuery()).getTerm()
        out.append((term.field(), term.text(), boosted.getBoost()))
    return out


def pairs(top, searcher) -> list[tuple[str, float]]:
    return [(h.docid, h.score) for h in searcher.hits(top)]


# ----------------------------------------------------------------------- terms searched as given
@pytest.mark.realdata
def test_a_long_term_is_one_term_on_every_path(searcher, service, tmp_path):
    """W16: a term of 255 characters or more is searched whole, so it matches nothing; it was cut
    into pieces, one of them 'cancer', and answered as {"cancer": 1}."""
    for long in ("x" * 255 + "cancer", "ä" * 255 + "cancer", "😀" * 128 + "cancer"):
        terms = {long: 1.0}
        assert searcher.search_terms(terms, 10) == []
        assert searcher.batch_search_terms_arrays([terms, CANCER], 10)[0].lucene_ids.size == 0
        body = post(service, "/v1/s/search", [{"terms": terms, "hits": 10}])[0]
        assert body.status_code == 200 and body.json()["candidates"] == []
        (tmp_path / "t.jsonl").write_text(json.dumps({"id": "a", "vector": terms}) + "\n", encoding="utf-8")
        out = run_cli("-m", "bm25aug.cli", "search", "--index", str(searcher.index_dir), "--terms",
                      str(tmp_path / "t.jsonl"), "--k", "2")
        assert out.returncode == 0 and out.stdout == "", out.stderr
    assert searcher.search_terms(CANCER, 10)  # while the short term alone matches


@pytest.mark.realdata
def test_lucene_syntax_is_a_term_like_any_other(searcher):
    """Characters the old parser read as syntax are the term's own: the structure holds them."""
    terms = {"a:b": 1.5, "AND": 2.0, "(x)^3": 0.5, "cancer*": 1.0, "\\": 0.25, "title:cancer": 1.0, "cancer": 1.0}
    query = searcher.index.weighted_query(terms)
    assert clauses_of(query) == [("contents", t, np.float32(w)) for t, w in terms.items()]
    assert pairs(searcher.search_terms_arrays(terms, 10), searcher) == pairs(searcher.search_terms_arrays(CANCER, 10),
                                                                             searcher)


@pytest.mark.realdata
def test_a_weight_float32_cannot_hold_is_refused_everywhere(searcher, service, tmp_path):
    """W23: 1e-50 passed the 'above 0' check and was searched as boost 0 (hits in docid order,
    scores 0 and -0); now it is one line on the library, REST and the CLI, as 0 drops a term."""
    for weight in (1e-50, 5e-324, MIN_TERM_WEIGHT / 2):
        with pytest.raises(UserError, match="smallest boost") as e:
            searcher.search_terms({"cancer": weight}, 10)
        assert "\n" not in str(e.value) and "fix:" in str(e.value)
        answer = post(service, "/v1/s/search", [{"terms": {"cancer": weight}, "hits": 10}])[0]
        assert answer.status_code == 400 and "smallest boost" in answer.json()["error"]
        (tmp_path / "t.jsonl").write_text(json.dumps({"id": "a", "vector": {"cancer": weight}}) + "\n")
        out = run_cli("-m", "bm25aug.cli", "search", "--index", str(searcher.index_dir), "--terms",
                      str(tmp_path / "t.jsonl"))
        assert out.returncode == 2 and "smallest boost" in out.stderr and out.stderr.count("\n") == 1
    # the smallest normal float32 is held (its scores round to 0 as Anserini rounds, ties by docid)
    assert searcher.search_terms({"cancer": MIN_TERM_WEIGHT, "zzqqx": 1.0}, 3)
    assert searcher.search_terms({"cancer": 0.0}, 10) == []  # 0 drops the term, and nothing is left


@pytest.mark.realdata
def test_a_term_with_whitespace_is_refused_by_the_library_as_by_rest(searcher, service):
    """PY1: the library searched 'vitamin b12' as vitamin OR b12, which REST refused."""
    with pytest.raises(UserError, match="whitespace"):
        searcher.search_terms({"vitamin b12": 1.0})
    with pytest.raises(UserError, match="whitespace"):
        searcher.batch_search_terms_arrays([CANCER, {"vitamin\tb12": 1.0}])
    assert post(service, "/v1/s/search", [{"terms": {"vitamin b12": 1.0}}])[0].status_code == 400


@pytest.mark.realdata
def test_too_many_clauses_on_a_multifield_index_is_the_querys_limit(tmp_path_factory):
    """C17: 40,000 terms on two fields are 80,000 clauses: the clause limit with the number and the
    fix, never 'the index is damaged'; 32,768 terms (65,536 clauses) search."""
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index
    from bm25aug.search.bm25 import BM25Searcher
    from conftest import write_beir

    root = tmp_path_factory.mktemp("mf_clauses")
    mf = BM25Searcher(ensure_index(load_dataset(str(write_beir(root / "tiny"))), "multifield", root / "indexes"))
    with pytest.raises(UserError) as e:
        mf.search_terms({f"t{i}": 1.0 for i in range(40_000)})
    assert "clause limit" in str(e.value) and "80,000" in str(e.value) and "damaged" not in str(e.value)
    assert "32,768" in str(e.value)
    with pytest.raises(UserError, match="clause limit"):
        mf.batch_search_terms_arrays([CANCER, {f"t{i}": 1.0 for i in range(40_000)}])
    mf.search_terms({f"t{i}": 1.0 for i in range(MAX_CLAUSES // 2)})  # exactly the limit: searched


# Terms as a hostile client writes them: any Unicode (whitespace, controls and lone surrogates
# included, which must be refused), Lucene's syntax characters, up to Lucene's longest term and past it.
_TERMS = st.one_of(st.text(min_size=1, max_size=12),
                   st.text(alphabet='+-!():^[]"{}~*?|&/\\ AND', min_size=1, max_size=6),
                   st.builds(lambda c, n: c * n, st.sampled_from(["x", "é", "😀", "中"]),
                             st.integers(240, MAX_TERM_BYTES // 3 + 10)))
_WEIGHTS = st.one_of(st.just(0.0), st.floats(1e-45, MAX_TERM_WEIGHT), st.floats(1e-45, 1e-30),
                     st.floats(MAX_TERM_WEIGHT, 1e7))


@pytest.mark.realdata
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(terms=st.dictionaries(_TERMS, _WEIGHTS, min_size=1, max_size=8))
def test_any_term_list_is_searched_exactly_or_refused_the_same_way(searcher, terms):
    """The query Lucene runs holds exactly the terms with a positive weight, in order, with their
    float32 boosts; or the list is refused in one line, by the library and by what REST, MCP and
    the CLI check alike (``check_term_list``); one query and a batch rank alike."""
    try:
        checked = check_term_list(terms, MAX_CLAUSES)
    except UserError as e:
        assert "\n" not in str(e) and "fix:" in str(e)
        with pytest.raises(UserError):
            searcher.search_terms(terms, 5)
        with pytest.raises(UserError):
            searcher.batch_search_terms_arrays([terms], 5)
        return
    kept = [("contents", t, np.float32(w)) for t, w in checked.items() if w > 0]
    query = searcher.index.weighted_query(checked)
    assert (clauses_of(query) if query is not None else []) == kept
    alone = searcher.search_terms_arrays(terms, 5)
    batch = searcher.batch_search_terms_arrays([terms, CANCER], 5, threads=2)[0]
    assert pairs(alone, searcher) == pairs(batch, searcher)


# ------------------------------------------------------------------------------------ query ids
@pytest.mark.realdata
@pytest.mark.parametrize("qid", ["\ud800", "q\udc80x"])
def test_a_query_id_with_a_lone_surrogate_is_one_line(scifact_flat, tmp_path, qid):
    """C14, C15: a traceback after the search, or a raw 0x80 byte written into the run."""
    terms, queries = tmp_path / "t.jsonl", tmp_path / "q.jsonl"
    terms.write_text(json.dumps({"id": qid, "vector": CANCER}) + "\n", encoding="utf-8")
    queries.write_text(json.dumps({"_id": qid, "text": "cancer"}) + "\n", encoding="utf-8")
    for flag, path in (("--terms", terms), ("--queries", queries)):
        for extra in ([], ["--output", str(tmp_path / "run.trec")]):
            out = run_cli("-m", "bm25aug.cli", "search", "--index", str(scifact_flat), flag, str(path), *extra)
            assert out.returncode == 2 and "lone surrogate" in out.stderr, out.stderr
            assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr and out.stdout == ""
    assert not (tmp_path / "run.trec").exists()


# ----------------------------------------------------------------------------- training, models
def test_both_heads_ablated_is_refused_before_any_work():
    """ST7: a traceback after 7 s of training set-up; now the config itself refuses."""
    from bm25aug.train.arguments import TrainConfig

    for side in ("contextual", "static"):
        with pytest.raises(UserError, match="nothing to train"):
            TrainConfig(use_weights=False, use_augmentation=False, query_side=side, output_dir="x")


def _static_model(folder):
    from bm25aug.model.static import StaticQueryModel

    model = StaticQueryModel.from_tokenizer(target="flat")
    model.fit_table([model.occurrences("cancer cells grow")], [{"tumor": 1.0}], 2)
    model.save_pretrained(folder)
    return folder


def test_an_explicit_contextual_side_with_a_static_init_model_is_refused(tmp_path):
    """ST5: the run trained a static table while its config said contextual."""
    from bm25aug.train.arguments import TrainConfig

    static = _static_model(tmp_path / "static")
    with pytest.raises(UserError, match="is a static model"):
        TrainConfig.for_dataset("scifact", None, query_side="contextual", init_from=str(static),
                                output_dir=str(tmp_path / "out"))
    from bm25aug.train.arguments import check_asked_side

    with pytest.raises(UserError, match="is a static model"):
        check_asked_side("contextual", str(static))  # adapt's check
    check_asked_side("static", str(static))  # the model's own side: no clash
    check_asked_side(None, str(static))


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_model_with_nan_or_infinite_weights_is_refused_when_it_loads(tmp_path, value):
    """ST13: NaN in a static table's weights loaded, and dropped the query's own terms at search."""
    from safetensors.torch import load_file, save_file

    from bm25aug.model.loading import load_model

    folder = _static_model(tmp_path / "m")
    state = load_file(str(folder / "model.safetensors"))
    name = next(iter(state))
    state[name].view(-1)[0] = value
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(UserError, match="NaN or infinite"):
        load_model(folder)


# ------------------------------------------------------------------------------------------ adapt
def _adapt_args(tmp_path, **given) -> argparse.Namespace:
    from bm25aug.adapt.command import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = []
    for k, v in given.items():
        argv += [f"--{k.replace('_', '-')}"] + ([] if v is True else [str(v)])
    return parser.parse_args(argv)


def test_a_corpus_file_never_takes_the_index_of_a_dataset_of_its_name(tmp_path):
    """A25: --corpus DIR/scifact/corpus.jsonl rebuilt the real scifact.flat from 300 documents."""
    from bm25aug.adapt.source import corpus_dataset
    from conftest import write_beir

    one, two = write_beir(tmp_path / "a" / "scifact"), write_beir(tmp_path / "b" / "scifact", docs={"d1": ("", "x y")})
    a, b = corpus_dataset(one / "corpus.jsonl"), corpus_dataset(two / "corpus.jsonl")
    assert a.name.startswith("scifact-") and b.name.startswith("scifact-") and a.name != b.name
    assert corpus_dataset(one / "corpus.jsonl").name == a.name  # the same file: the same index, reused


def test_adapt_refuses_its_output_folder_before_any_work(tmp_path):
    """A9-A12: refused after building the index, making pseudo-queries and running the teacher
    (14-39 s); ``check_before_work`` reads no corpus, so these take no time."""
    from pathlib import Path

    from bm25aug.adapt.preflight import check_before_work
    from conftest import write_beir

    data = write_beir(tmp_path / "data" / "tiny")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    cases = {"holds files bm25aug did not write": dict(corpus=data / "corpus.jsonl", output_dir=foreign),
             "lies inside": dict(dataset=data, output_dir=data / "run"),
             "holds --index-root": dict(corpus=data / "corpus.jsonl", output_dir=tmp_path / "o",
                                        index_root=tmp_path / "o" / "idx")}
    for why, given in cases.items():
        args = _adapt_args(tmp_path, **given)
        with pytest.raises(UserError, match=why):
            check_before_work(args, Path(args.output_dir), tmp_path / "none.json")
    assert (foreign / "notes.txt").read_text() == "mine"


def test_adapt_resume_without_its_settings_or_on_another_corpus_is_refused(tmp_path):
    """A21: --resume without adapt_settings.json took any new settings; A22: another corpus was
    refused only after the teacher had encoded it."""
    from pathlib import Path

    from bm25aug.adapt.preflight import check_before_work
    from bm25aug.io import write_json
    from bm25aug.train.run_folder import RUN_MARKER
    from conftest import write_beir

    data = write_beir(tmp_path / "data" / "tiny")
    run = tmp_path / "run"
    run.mkdir()
    (run / RUN_MARKER).write_text("{}")
    write_json(run / "config.json", {"dataset": "tiny", "lam": 0})
    (run / "last").mkdir()  # an epoch saved
    args = _adapt_args(tmp_path, corpus=data / "corpus.jsonl", output_dir=run, resume=True)
    with pytest.raises(UserError, match="cannot be checked"):
        check_before_work(args, Path(args.output_dir), run / "adapt_settings.json")
    write_json(run / "adapt_settings.json", {})
    write_json(run / "data.json", {"corpus_fingerprint": "another"})
    with pytest.raises(UserError, match="other corpora"):
        check_before_work(args, Path(args.output_dir), run / "adapt_settings.json")


def test_adapt_refuses_a_stock_index_without_document_vectors_at_once(tmp_path):
    """A14: refused after 14 s of work; ``--help`` named only -storeRaw."""
    from bm25aug.adapt.source import resolve
    from test_stock_index import pyserini_index

    stock = pyserini_index(tmp_path / "stock.flat")  # -storeRaw, no -storeDocvectors
    with pytest.raises(UserError, match="-storeDocvectors"):
        resolve(None, None, str(stock))
    assert "-storeDocvectors" in run_cli("-m", "bm25aug.cli", "adapt", "--help").stdout


# ----------------------------------------------------------------------------------------- server
def big_app(body: bytes, written: list):
    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            return await send({"type": "lifespan.shutdown.complete"})
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
        written.append(scope["path"])
    return app


def test_a_reader_that_never_reads_is_dropped_and_frees_its_answer():
    """SV3: 30 clients that never read a 7.7 MB answer held 16 MB each until they closed. Now
    an answer left unread is dropped after ``send_timeout_s``, and answers waiting together never
    hold more than ``unread_budget_mb``: past it the longest waiting goes first."""
    body, written = b"x" * (24 << 20), []  # past the socket buffers
    server = InThread(big_app(body, written), send_timeout_s=4.0, unread_budget_mb=40)
    try:
        stalled = []
        for _ in range(3):
            s = server.connect()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(request("/big"))
            stalled.append(s)
        started = time.monotonic()
        until(lambda: len(written) == 3, "the three answers handed to the transport")
        # the budget: two answers of about 24 MB do not fit in 40 MB, so one waits at a time
        until(lambda: server.connections() <= 1, "the budget drops the oldest unread answers")
        assert time.monotonic() - started < 4.0  # before any send timeout could have dropped them
        until(lambda: server.connections() == 0, "the last unread answer dropped at the send timeout")
        with server.connect() as reader:  # a client that reads gets the whole answer
            reader.sendall(request("/big"))
            head, _, got = read_all(reader).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200") and len(got) == len(body)
        for s in stalled:
            s.close()
    finally:
        server.stop()


def test_a_connection_past_the_cap_reads_its_503_without_a_reset():
    """SV4: 8 of 12 concurrent searches saw ConnectionResetError, none the documented 503."""
    from test_serve_hardening import hold, tiny_app

    gate, holding = threading.Event(), []
    server = InThread(tiny_app(gate, holding=holding), max_connections=2, header_timeout_s=60)
    try:
        busy = hold(server, 2, holding)
        for _ in range(5):
            resets: list = []
            with server.connect() as refused:
                refused.sendall(request("/health") + b"x" * 50_000)  # a request, and more, left unread
                time.sleep(0.1)
                status, error = json_error(read_all(refused, resets))
            assert status == 503 and "connections" in error and not resets
        gate.set()
        assert all(read_all(s).startswith(b"HTTP/1.1 200") for s in busy)
    finally:
        server.stop()


@pytest.mark.realdata
def test_a_body_the_server_cannot_read_is_a_400_with_its_fix(service):
    """W21: a body nested 5,000 deep, or not UTF-8, was 'There was an error parsing the body'."""
    deep = ('{"terms": ' + "[" * 5000 + "]" * 5000 + "}").encode()
    bad = b'{"terms": {"canc\xff\xfeer": 1}}'
    for answer in post(service, "/v1/s/search", [deep, bad], raw=True):
        error = answer.json()["error"]
        assert answer.status_code == 400 and "fix:" in error and "\n" not in error, error
