"""The cluster index keeps its promises under faults, on a real two-node cluster this module starts
and removes (probe round five, issue 57: O4, O5, O7, O18-O20, I14, I22, S4): no silent cap at the
result window, an index made again under a searcher (and under the server: a 503, and /health says
why), a bounded document-frequency cache, damaged and foreign indexes, a silent node first in the
URL, and the whole cluster gone. The client's promises without a cluster are in
``test_reliability_five_client``, whose fake servers this file borrows.

The cluster runs OpenSearch 2.19 (``--opensearch 2.19.6``, issue 60 item 4), the engine users of 2.x
run, while ``test_cluster`` runs the default 3.x: SciFact scores here as in our process to float32
rounding (2.x's BM25 is (1 + k1) times Lucene's, divided back), and the cluster's recorded version
is the one a later start runs, another refused."""

from __future__ import annotations

import asyncio
import logging
import random
import shutil
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest

from bm25aug.bm25_defaults import K1
from bm25aug.data.registry import load_dataset
from bm25aug.errors import Unavailable, UserError
from bm25aug.lucene.index import ensure_index
from bm25aug.opensearch import local, nodes
from bm25aug.opensearch.launcher import ENGINES
from bm25aug.opensearch.identity import RECHECK_S, IndexChanged
from bm25aug.opensearch.index import OpenSearchIndex
from bm25aug.opensearch.ingest import ingest
from bm25aug.opensearch.schema import index_body
from bm25aug.search.bm25 import BM25Searcher
from conftest import write_beir
from cluster_parity import assert_unrounded_parity, unrounded_tops
from test_cluster import _assert_parity
from test_reliability_five_client import ENV, RECORD, _client, _one_line, _timed, fakes, plain_environment  # noqa: F401 (fixtures)

pytestmark = pytest.mark.realdata
ENGINE_2 = next(version for version in ENGINES if version.startswith("2."))  # 2.19.6

@pytest.fixture(scope="module")
def corpora(tmp_path_factory, data_dir):
    """Two small corpora that match "zebra": ``ties`` (150 documents alike, ids in no shard's order,
    and 150 others) with its folder index, and ``other`` (ids ``o...``)."""
    rng, root = random.Random(5), tmp_path_factory.mktemp("client-corpora")
    docs = {f"z{rng.randrange(10 ** 6):06d}-{i}": ("Zebra", "zebra stripes on the savanna") for i in range(150)}
    words = "alpha beta gamma delta epsilon zeta theta iota kappa lambda".split()
    docs |= {f"d{i:03d}": (f"Doc {i}", " ".join(rng.choice(words) for _ in range(8)) + " zebra" * (i % 3))
             for i in range(150)}
    ties = load_dataset(str(write_beir(root / "ties", docs=docs, queries={"q1": "zebra"})))
    others = {f"o{i:03d}": ("Other", f"zebra number {i} of another corpus") for i in range(100)}
    other = load_dataset(str(write_beir(root / "other", docs=others, queries={"q1": "zebra"})))
    return ties, other, ensure_index(ties, "flat", root / "indexes")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, data_dir):
    root = tmp_path_factory.mktemp("client-cluster") / "root"
    state = local.start(2, root, opensearch=ENGINE_2)
    try:  # every node in, a manager elected, before the first ingest (this machine's 2 cores are shared)
        _client(state["url"]).request("GET", "/_cluster/health", params={"wait_for_nodes": "2", "timeout": "60s"})
        yield state
    finally:
        if hasattr(local, "delete"):
            local.delete(root)
        else:
            local.stop(root)
        shutil.rmtree(root, ignore_errors=True)


def _ingested(cluster, dataset, name: str, window: int | None = None) -> str:
    url = f"{cluster['url']}/{name}"
    ingest(dataset, url, force=True)
    if window is not None:
        _client(url).request("PUT", f"/{name}/_settings", {"index": {"max_result_window": window}})
    return url


@pytest.fixture(scope="module")
def windowed(cluster, corpora):
    """The tie corpus on the cluster with a result window of 50."""
    return _ingested(cluster, corpora[0], "ties", window=50)


# ------------------------------------------------ O4, O5: no silent cap at the window, ties past it
@pytest.mark.realdata
def test_k_past_the_result_window_is_refused_never_cut(corpora, windowed):
    searcher, folder, num_docs = BM25Searcher(windowed), BM25Searcher(corpora[2]), len(corpora[0].corpus)
    assert len(folder.search("zebra", 1000)) == 250  # the folder: every match
    for k in (51, num_docs - 1, num_docs, num_docs + 1, 20000):  # k at or past the index's size included
        for call in (lambda: searcher.search("zebra", k), lambda: searcher.batch_search_arrays(["zebra"], k)):
            with pytest.raises(UserError) as refused:
                call()
            _one_line(refused.value, f"k={k} is past {windowed}'s result window (50 hits",
                      f"fix: ask for at most 50 hits, or raise that index setting to {min(k, num_docs)}")
    done = subprocess.run([sys.executable, "-m", "bm25aug.cli", "search", "--index", windowed, "--query", "zebra",
                           "--k", "20000"], env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "result window (50 hits" in done.stderr
    for k in (10, 49, 50):  # 150 documents tie, the window holds 50: still the tie's first by external id
        assert [(h.docid, round(h.score, 4)) for h in searcher.search("zebra", k)] == \
            [(h.docid, round(h.score, 4)) for h in folder.search("zebra", k)]
    queries = ["zebra", "zebra stripes"]
    assert [searcher.docids[t.lucene_ids].tolist() for t in searcher.batch_search_arrays(queries, 50)] == \
        [folder.docids[t.lucene_ids].tolist() for t in folder.batch_search_arrays(queries, 50)]
    _client(windowed).request("PUT", "/ties/_settings", {"index": {"max_result_window": num_docs}})
    try:  # with the window the fix names, every match, as the folder
        assert [h.docid for h in BM25Searcher(windowed).search("zebra", 20000)] == \
            [h.docid for h in folder.search("zebra", 20000)]
    finally:
        _client(windowed).request("PUT", "/ties/_settings", {"index": {"max_result_window": 50}})


# ------------------------------------------------------------ O19: an index made again under a searcher
@pytest.mark.realdata
def test_an_index_made_again_under_a_searcher_is_refused(cluster, corpora):
    """While another corpus is ingested into the searched name (--force), every search answers with
    the first corpus's hits or ``IndexChanged``, never the other corpus's, nor an empty answer; once
    refused, always refused; a new searcher reads the new corpus."""
    ties, other, _ = corpora
    url = _ingested(cluster, ties, "swap")
    searcher = BM25Searcher(url)
    assert len(searcher.search("zebra", 5)) == 5
    outcomes, done = [], threading.Event()

    def poll():
        while not done.wait(0.02):
            try:
                outcomes.append([h.docid for h in searcher.search("zebra", 5)])
            except Exception as e:  # noqa: BLE001  (anything but IndexChanged fails below)
                outcomes.append(e)

    (poller := threading.Thread(target=poll)).start()
    try:
        time.sleep(0.5)
        ingest(other, url, force=True)
        time.sleep(RECHECK_S + 0.5)
    finally:
        done.set()
        poller.join(60)
    refused = [i for i, o in enumerate(outcomes) if isinstance(o, Exception)]
    assert refused and all(isinstance(o, IndexChanged) for o in outcomes[refused[0]:]), [repr(o)[:300] for o in outcomes if isinstance(o, Exception)]
    assert all(len(hits) == 5 and set(hits) <= set(ties.corpus) for hits in outcomes[:refused[0]]), outcomes
    _one_line(outcomes[-1], f"{url} is no longer the index this searcher opened")
    with pytest.raises(IndexChanged):
        searcher.search("zebra", 5)
    fresh = BM25Searcher(url)
    assert {h.docid for h in fresh.search("zebra", 5)} <= set(other.corpus)
    ingest(ties, url, force=True)  # no search while it runs: the next check finds another uuid
    time.sleep(RECHECK_S)
    with pytest.raises(IndexChanged, match="it was deleted and made again: index.uuid"):
        fresh.search("zebra", 5)
    gone = BM25Searcher(url)  # deleted under it: refused at once, whatever is asked
    _client(url).request("DELETE", "/swap")
    for call in (lambda: gone.search("zebra", 3), lambda: gone.batch_search_arrays(["zebra"], 3),
                 lambda: gone.index.doc_freqs(["never-seen-word"])):
        with pytest.raises(IndexChanged, match="it was deleted"):
            call()


# ------------------------------------------------------------------------------ S4: a bounded df cache
@pytest.mark.realdata
def test_the_document_frequency_cache_is_bounded(corpora, windowed):
    index, asked, rng = OpenSearchIndex(windowed, df_entries=64), [], random.Random(1)
    request = index.client.request
    index.client.request = lambda method, path, *a, **k: asked.append(path) or request(method, path, *a, **k)
    zebra = BM25Searcher(corpora[2]).index.doc_freq("zebra")
    for _ in range(5):
        words = ["".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(9)) for _ in range(200)] + ["zebra"]
        before = len(asked)
        counts = index.doc_freqs(words)
        assert asked[before:].count("/_msearch") == 1  # the new words asked at once
        assert counts["zebra"] == zebra == sum(counts.values()) and len(index._df) <= 64
    before = len(asked)
    assert index.doc_freqs(["zebra"]) == {"zebra": zebra} and "/_msearch" not in asked[before:]  # kept: used last


# ----------------------------------------------------- I22, I14, O7: damaged, foreign, unfinished, too long
def _forge(cluster, name: str, record, docs: int = 0) -> str:
    url, body = f"{cluster['url']}/{name}", index_body(1, 0)
    body["mappings"]["_meta"] = {"bm25aug": record} if record is not None else {}
    client = _client(url)
    client.request("PUT", f"/{name}", body)
    for i in range(docs):
        client.request("PUT", f"/{name}/_doc/p{i}", {"contents": "precious", "id": f"p{i}"}, params={"refresh": "true"})
    return url


@pytest.mark.realdata
def test_damaged_foreign_unfinished_and_long_name_a_fix_that_works(cluster, windowed):
    """I22: a forged record is one line (no ValueError, KeyError, AttributeError); I14: a foreign
    index and an unfinished one name the command that works; O7: the clause limit's fix fits."""
    for name, record, why in [("forged1", {**RECORD, "k1": "abc"}, "'k1' is 'abc'"),
                              ("forged2", {k: v for k, v in RECORD.items() if k != "k1"}, "it has no 'k1'"),
                              ("forged4", "made by hand", "it is not an object")]:
        url = _forge(cluster, name, record)
        with pytest.raises(UserError) as refused:
            BM25Searcher(url).search("cancer", 10)
        assert _one_line(refused.value, f"damaged ({why})").startswith(f"{url} has a bm25aug record")
    done = subprocess.run([sys.executable, "-m", "bm25aug.cli", "search", "--index", url, "--query", "cancer"],
                          env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1
    with pytest.raises(UserError) as foreign:
        BM25Searcher(_forge(cluster, "precious", None, docs=1))
    message = _one_line(foreign.value, "was not made by bm25aug", "fix: search it as it is, read-only",
                        f"{cluster['url']}/precious?field=NAME",
                        f"`bm25aug index --dataset NAME --to {cluster['url']}/NEWNAME`")
    assert "resume" not in message and "--force" not in message

    url = _forge(cluster, "unfinished", {**RECORD, "state": "ingesting", "next": 4})
    with pytest.raises(UserError) as unfinished:
        BM25Searcher(url)
    _one_line(unfinished.value, "its ingest has not finished (at document 4 of tiny's corpus)",
              f"`bm25aug index --dataset tiny --to {url}`, same options) to resume it")
    with pytest.raises(UserError) as through_field:  # ?field= on bm25aug's own index: no way round the guard
        BM25Searcher(url + "?field=contents")
    _one_line(through_field.value, "its ingest has not finished", f"--to {url}`")
    searcher = BM25Searcher(windowed)
    with pytest.raises(UserError) as long_query:
        searcher.search(" ".join(f"w{i}x" for i in range(1100)), 10)
    assert "--top-k" not in _one_line(long_query.value, "the query has 1100 terms", "at most 1024 (indices.query.bool."
                                      "max_clause_count); fix: use a shorter query, of at most 1024 distinct words")
    with pytest.raises(UserError) as long_list:
        searcher.search_terms({f"t{i}": 1.0 for i in range(1025)}, 10)
    _one_line(long_list.value, "the term list has 1025 terms", "fix: send at most its 1024 heaviest terms")


# ------------------------------------------------- O20: the acceptance, a silent node first on a real cluster
@pytest.mark.realdata
def test_a_silent_node_first_in_the_url_delays_one_request(windowed, fakes, caplog):
    silent = fakes()
    with caplog.at_level(logging.WARNING, logger="bm25aug.opensearch"):
        searcher, opened = _timed(lambda: BM25Searcher(f"http://127.0.0.1:{silent.port},{windowed.split('://')[1]}"))
    assert opened < 30 and any(f"127.0.0.1:{silent.port}" in r.getMessage() for r in caplog.records)
    assert _timed(lambda: searcher.search("zebra", 3))[1] < 5
    time.sleep(nodes.PROBE_AFTER_S + 0.5)  # its probe is due: it runs aside, the search does not wait
    hits, took = _timed(lambda: searcher.search("zebra", 3))
    assert len(hits) == 3 and took < 5


# ------------------------------- O18, O19 through the server: a 503 with Retry-After, and /health says why
def asgi_get(app, path: str) -> httpx.Response:
    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as client:
            return await client.get(path)
    return asyncio.run(run())


def test_the_server_answers_503_once_its_index_is_made_again(cluster, corpora):
    """O19: the server answered 200 with 0 candidates, then another corpus's ids, under the same
    name. O18: an outage was a 400 while /health said ok. Now every request on that index is a 503
    with Retry-After until the server is restarted, and /health answers 503 naming the index."""
    from bm25aug.serve.config import IndexSpec, ServeConfig
    from bm25aug.serve.rest import create_app
    from bm25aug.serve.service import SearchService

    ties, other, _ = corpora
    url = _ingested(cluster, ties, "served")
    service = SearchService(ServeConfig(indexes=[IndexSpec("os", url)], workers=1))
    try:
        app = create_app(service)
        first = asgi_get(app, "/v1/os/search?query=zebra&hits=3&method=bm25")
        assert first.status_code == 200 and {c["docid"] for c in first.json()["candidates"]} <= set(ties.corpus)
        assert asgi_get(app, "/health").json()["status"] == "ok"
        ingest(other, url, force=True)
        time.sleep(RECHECK_S + 0.2)
        for path in ("/v1/os/search?query=zebra&hits=3&method=bm25", "/v1/os/doc/o001",
                     "/v1/os/search?query=zebra&hits=3&method=bm25"):
            down = asgi_get(app, path)
            assert down.status_code == 503 and int(down.headers["retry-after"]) > 0, (path, down.text)
            assert "is no longer the index this searcher opened" in down.json()["error"], down.text
        health = asgi_get(app, "/health")
        assert health.status_code == 503 and health.json()["status"] == "unavailable", health.text
        assert "is no longer the index" in health.json()["problems"]["os"]
    finally:
        service.close()


# ------------------------------------------- issue 60 item 4: OpenSearch 2.19 scores as in-process
@pytest.mark.realdata
def test_bm25_flat_and_augmented_on_opensearch_2_score_as_in_process(cluster, scifact):
    """SciFact's 300 test queries, bm25-flat and the packaged model's term lists, through 2 shards
    (dfs_query_then_fetch) on 2.19: the same top 10 (rounded ties aside), Anserini's scores within
    its rounding, Lucene's own within float32 rounding of (1 + k1) divided back."""
    from bm25aug.search.augmented import AugmentedSearcher

    url = f"{cluster['url']}/scifact"
    ingest(scifact, url, force=True)
    flat = ensure_index(scifact, "flat")
    queries = list(scifact.split("test").queries.values())
    mine, theirs = AugmentedSearcher.from_pretrained("general", flat), AugmentedSearcher.from_pretrained("general", url)
    assert theirs.bm25.index.scale == np.float32(1) + np.float32(K1)  # LegacyBM25Similarity's (1 + k1)
    lists = mine.term_lists(queries)
    assert theirs.term_lists(queries) == lists and len(lists) == 300
    here, there = mine.bm25.index, theirs.bm25.index
    _assert_parity(mine.bm25, theirs.bm25, mine.bm25.batch_search_arrays(queries, 100),
                   theirs.bm25.batch_search_arrays(queries, 100, threads=2))
    _assert_parity(mine, theirs, mine.batch_search_terms_arrays(lists, 100),
                   theirs.batch_search_terms_arrays(lists, 100, threads=2))
    flat_items = [(here.analyzed_query(q), there.analyzed_query(q)) for q in queries]
    term_items = [(here.weighted_query(terms), there.terms_element(terms)) for terms in lists]
    for items in (flat_items, term_items):
        assert_unrounded_parity(unrounded_tops(here, there, items), exact=False)


# --------------------------------------------------- O18, last: the whole cluster gone under a searcher
@pytest.mark.realdata
def test_a_cluster_that_is_gone_is_unavailable(cluster, windowed):
    searcher = BM25Searcher(windowed)
    assert searcher.search("zebra", 3)
    for node in cluster["nodes"]:
        local.kill_node(cluster, node["name"])
    for call in (lambda: searcher.search("zebra stripes", 3), lambda: BM25Searcher(windowed)):
        with pytest.raises(Unavailable) as down:
            call()
        assert str(down.value).startswith("no node of the cluster answered") and "\n" not in str(down.value)


# ------------------------------- issue 60 item 4, after the cluster is gone: its recorded version
@pytest.mark.realdata
def test_start_runs_the_recorded_version_and_refuses_another(cluster):
    """With every node down, `start` on the folder with another --opensearch is one line and starts
    nothing; without it, the nodes come back on the version the record names."""
    root = cluster["root"]
    other = next(version for version in ENGINES if version != ENGINE_2)
    done = subprocess.run([sys.executable, "-m", "bm25aug.cli", "cluster", "start", "--root", root, "--opensearch",
                           other], env=ENV, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"runs OpenSearch {ENGINE_2}" in done.stderr and f"not {other}; fix: start it without --opensearch" in \
        done.stderr
    assert not any(node["running"] for node in local.status(root)["nodes"])
    state = local.start(root=root)
    cluster.update(state)  # the fixture's teardown stops these nodes
    assert state["opensearch"] == ENGINE_2 and state["started_again"] == ["node-1", "node-2"]
    assert _client(state["url"]).request("GET", "/")["version"]["number"] == ENGINE_2
