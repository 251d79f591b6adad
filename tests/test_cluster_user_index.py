"""Issue 60, item 5: an OpenSearch index the user made with opensearch-py alone, searched as it is
(``?field=NAME``) and never written to, on a one-node cluster this module starts and deletes.

SciFact goes into the index ``theirs`` as a user would index it: ``body`` holds the title and the
text joined as the flat index joins them, analyzed by OpenSearch's built-in ``english`` analyzer
with a BM25 similarity of Pyserini's k1=0.9 b=0.4; its multi-field ``body.os`` has the same analyzer
and OpenSearch's default similarity (k1=1.2 b=0.75), ``body.bool`` the ``boolean`` similarity;
``title`` has the ``standard`` analyzer. Two small indexes beside it: ``extra-stop`` (``english``'s
chain and one stopword more, which only a query holds) and ``no-source`` (``_source`` disabled).
Every search must give the in-process flat index's top 10 with the same k1 and b, every other field
is refused in one line naming why, and the index, its settings and the cluster's list of indexes
must be the same after as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from cluster_parity import served

pytestmark = pytest.mark.realdata
# a 512 MB node on a shared 2-core machine may need more than the default 20 s for a batch's _msearch
SLOW = {"BM25AUG_OPENSEARCH_READ_TIMEOUT": "120"}
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", **SLOW}
NAME = "theirs"


def _mapping() -> dict:
    english = {"type": "text", "analyzer": "english"}
    return {"settings": {"index": {"number_of_shards": 2, "number_of_replicas": 0,
                                   "similarity": {"pyserini": {"type": "BM25", "k1": 0.9, "b": 0.4}}}},
            "mappings": {"properties": {"title": {"type": "text"}, "year": {"type": "integer"},
                                        "body": {**english, "similarity": "pyserini", "fields": {
                                            "os": english, "bool": {**english, "similarity": "boolean"}}}}}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, scifact):
    from opensearchpy import OpenSearch, helpers

    from bm25aug.opensearch import local

    patience = pytest.MonkeyPatch()
    for key, value in SLOW.items():
        patience.setenv(key, value)
    root = tmp_path_factory.mktemp("user-index") / "root"
    state = local.start(1, root, heap="512m")
    try:
        node = state["nodes"][0]
        client = OpenSearch(hosts=[{"host": "127.0.0.1", "port": node["http"]}], timeout=120)
        assert client.cat.indices(format="json") == []  # a new cluster, ours alone
        client.indices.create(index=NAME, body=_mapping())
        docs = ({"_index": NAME, "_id": docid, "_source": {"title": doc.title, "body": doc.contents}}
                for docid, doc in scifact.corpus.items())
        helpers.bulk(client, docs, refresh=True)
        chain = ["possessive", "lowercase", "english_stop", "more", "porter_stem"]  # `english` and a stopword more
        client.indices.create(index="extra-stop", body={
            "settings": {"analysis": {"filter": {"possessive": {"type": "stemmer", "language": "possessive_english"},
                                                 "english_stop": {"type": "stop", "stopwords": "_english_"},
                                                 "more": {"type": "stop", "stopwords": ["zebra"]}},
                                      "analyzer": {"english_more": {"tokenizer": "standard", "filter": chain}}}},
            "mappings": {"properties": {"text": {"type": "text", "analyzer": "english_more"}}}})
        client.indices.create(index="no-source", body={"mappings": {"_source": {"enabled": False}, "properties": {
            "text": {"type": "text", "analyzer": "english"}}}})
        for index in ("extra-stop", "no-source"):
            helpers.bulk(client, ({"_index": index, "_id": str(i), "_source": {"text": t}} for i, t in
                                  enumerate(["vitamin d and bone health", "cancer risk in adults"])), refresh=True)
        yield state, client, f"{state['url']}/{NAME}"
    finally:
        local.delete(root)
        patience.undo()
        assert not root.exists()


@pytest.fixture(scope="module")
def flat(scifact):
    from bm25aug.lucene.index import ensure_index

    return ensure_index(scifact, "flat")


def _snapshot(client) -> dict:
    """What a write would change: the index list (hidden ones too), each index's settings, mapping,
    documents, sequence numbers, indexing and refresh counts by us, and the cluster's settings."""
    indices = client.indices.get(index="*", expand_wildcards="all")
    stats = client.indices.stats(index=NAME, level="shards", metric="docs,indexing")["indices"][NAME]["shards"]
    shards = {n: [(c["docs"]["count"], c["indexing"]["index_total"], c["indexing"]["delete_total"],
                   c["seq_no"]["max_seq_no"]) for c in copies] for n, copies in stats.items()}
    return {"indices": indices, "shards": shards, "cluster": client.cluster.get_settings(),
            "count": client.count(index=NAME)["count"]}


def _top10(searcher, tops) -> list[list[tuple[str, float]]]:
    return [list(zip(searcher.docids[t.lucene_ids[:10]].tolist(), t.scores[:10].tolist())) for t in tops]


def _same(ours, theirs, exact: bool = False) -> None:
    """The same top 10, where documents whose rounded scores tie may trade places; scores to 2e-4.
    ``exact`` (OpenSearch 3.x, which scores with Lucene's own BM25Similarity): ids and scores equal."""
    if exact:
        assert ours == theirs
        return
    alike = [[d for d, _ in a] == [d for d, _ in b] or Counter((round(s, 3), d) for d, s in a) ==
             Counter((round(s, 3), d) for d, s in b) for a, b in zip(ours, theirs)]
    assert len(ours) == len(theirs) and sum(alike) >= 0.99 * len(ours), f"top 10 alike for {sum(alike)} of {len(ours)}"
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose([s for _, s in a], [s for _, s in b], atol=2e-4)


def test_bm25_and_augmented_on_their_index_rank_as_the_flat_index(cluster, flat, scifact):
    from bm25aug.eval.evaluate import EvalConfig, evaluate
    from bm25aug.search.augmented import AugmentedSearcher
    from bm25aug.search.bm25 import BM25Searcher

    _, client, url = cluster
    before = _snapshot(client)
    theirs = f"{url}?field=body"
    result = evaluate(EvalConfig(dataset="scifact", method="bm25-flat", companions=False, index=theirs, k=100))
    assert round(result.metrics["bm25-flat"]["ndcg@10"], 4) == 0.6789  # Pyserini's BEIR SciFact flat
    queries = list(scifact.split("test").queries.values())
    folder, cluster_searcher = BM25Searcher(flat), BM25Searcher(theirs)
    exact = int(client.info()["version"]["number"].split(".")[0]) >= 3  # BM25Similarity: Lucene's scores
    _same(_top10(folder, folder.batch_search_arrays(queries, 10)),
          _top10(cluster_searcher, cluster_searcher.batch_search_arrays(queries, 10, threads=2)), exact)
    local_aug = AugmentedSearcher.from_pretrained("general", flat)
    their_aug = AugmentedSearcher.from_pretrained("general", theirs)
    lists = local_aug.term_lists(queries[:100])
    assert their_aug.term_lists(queries[:100]) == lists
    _same(_top10(local_aug, local_aug.batch_search_terms_arrays(lists, 10)),
          _top10(their_aug, their_aug.batch_search_terms_arrays(lists, 10, threads=2)), exact)
    assert [h.docid for h in their_aug.search(queries[0], 10)] == [h.docid for h in local_aug.search(queries[0], 10)]
    stored = [json.loads(s.index.stored(s.search_arrays(queries[0], 1).lucene_ids.tolist())[0])
              for s in (cluster_searcher, folder)]
    assert stored[0] == stored[1]  # the same document, as a flat index stores it
    assert _snapshot(client) == before  # nothing written


def test_its_own_similarity_is_read_and_a_user_client_searches_it(cluster, flat, scifact):
    """``body.os`` scores with OpenSearch's default k1=1.2 b=0.75: refused with them named until they
    are passed, then the flat index's top 10 with them, through the user's own client; a batch's
    query texts are checked in a few ``_analyze`` requests, and not again once checked."""
    from opensearchpy import OpenSearch, Urllib3HttpConnection

    from bm25aug.errors import UserError
    from bm25aug.opensearch.index import OpenSearchIndex
    from bm25aug.search.bm25 import BM25Searcher

    state, client, url = cluster
    before = _snapshot(client)
    with pytest.raises(UserError, match=r"k1=1.2 b=0.75 \(OpenSearch's default similarity\).*"
                                        r"fix: pass --k1 1.2 --b 0.75"):
        BM25Searcher(f"{url}?field=body.os")
    queries = list(scifact.split("test").queries.values())[:100]
    folder = BM25Searcher(flat, 1.2, 0.75)
    ours = _top10(folder, folder.batch_search_arrays(queries, 10))
    seen = []

    class Noting(Urllib3HttpConnection):
        def perform_request(self, method, url, *args, **kwargs):
            seen.append(url.split("?")[0])
            return super().perform_request(method, url, *args, **kwargs)

    own = OpenSearch(hosts=[{"host": "127.0.0.1", "port": state["nodes"][0]["http"]}], timeout=60,
                     connection_class=Noting)
    given = OpenSearchIndex.from_client(own, f"{NAME}?field=body.os", k1=1.2, b=0.75)
    searcher = BM25Searcher(given, 1.2, 0.75)
    analyzed = lambda: seen.count(f"/{NAME}/_analyze")  # noqa: E731
    opening, chars = analyzed(), sum(len(q) + 1 for q in queries)
    _same(ours, _top10(searcher, searcher.batch_search_arrays(queries, 10)))
    assert 1 <= analyzed() - opening <= -(-chars // 5000)  # batched: at most 10,000 UTF-16 units a request
    checked = analyzed()
    _same(ours, _top10(searcher, searcher.batch_search_arrays(queries, 10)))
    _same(ours[:1], _top10(searcher, [searcher.search_arrays(queries[0], 10)]))
    assert analyzed() == checked  # remembered
    given.close()
    local = OpenSearchIndex(f"{url}?stats=local&field=body.os", 1.2, 0.75)  # both options at once
    assert local.search_type == "query_then_fetch" and local.layout.field == "body.os"
    assert own.count(index=NAME)["count"] == len(scifact.corpus)  # their client stays open
    assert _snapshot(client) == before


def test_another_analyzer_is_refused_naming_the_difference(cluster):
    from bm25aug.errors import UserError
    from bm25aug.search.bm25 import BM25Searcher

    state, client, url = cluster
    before = _snapshot(client)
    with pytest.raises(UserError) as refused:  # the standard analyzer: no stop words, no stemming
        BM25Searcher(f"{url}?field=title")
    message = str(refused.value)
    assert "field 'title' does not analyze text as the flat index does" in message and "\n" not in message
    assert "'the' on the cluster, 'patient' here" in message and "fix: name a field analyzed" in message
    for field, why in (("year", "is of type integer"), ("nope", "is not in its mapping")):
        with pytest.raises(UserError, match=f"field '{field}' {why}.*fix: name one of the index's text fields .*"
                                            r"\(body, body.bool, body.os, title\)"):
            BM25Searcher(f"{url}?field={field}", 1.2, 0.75)
    with pytest.raises(UserError, match=r"not made by bm25aug.*fix: search it as it is, read-only.*\?field=NAME \(its "
                                        r"text fields: body, body.bool, body.os, title\)") as foreign:
        BM25Searcher(url)
    assert "--force" not in str(foreign.value)
    with pytest.raises(UserError, match=r"field 'body.bool' scores with similarity 'boolean' \(type boolean\), "
                                        r"not BM25"):
        BM25Searcher(f"{url}?field=body.bool", 1.2, 0.75)
    with pytest.raises(UserError, match=r"_source of its documents holds no text at 'text'.*fix: name a field whose"):
        BM25Searcher(f"{state['url']}/no-source?field=text", 1.2, 0.75)
    # an analyzer that passes the probe and the stored documents and parts from ours on one word of a query
    other = BM25Searcher(f"{state['url']}/extra-stop?field=text", 1.2, 0.75)
    assert [h.docid for h in other.search("bone health", 2)] == ["0"]
    with pytest.raises(UserError, match=r"in the query \('zebra bone'\).*'bone' on the cluster, 'zebra' here"):
        other.search("zebra bone", 2)
    with pytest.raises(UserError, match=r"in query 2 of 2 \('zebra bone'\)"):
        other.batch_search(["bone health", "zebra bone"], ["q1", "q2"], 2, threads=1)
    assert _snapshot(client) == before


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "bm25aug.cli", *args], capture_output=True, text=True, env=ENV,
                          timeout=300)


def test_search_cli_and_serve_on_their_index(cluster, flat):
    """`bm25aug search --index URL?field=body` prints what it prints for the folder; `bm25aug serve`
    answers Anserini's REST search with the same hits and serves the document."""
    _, client, url = cluster
    before = _snapshot(client)
    query = "vitamin D deficiency and cancer risk"
    ours, theirs = _cli("search", "--index", str(flat), "--query", query), \
        _cli("search", "--index", f"{url}?field=body", "--query", query)
    assert theirs.returncode == 0, theirs.stderr
    assert theirs.stdout == ours.stdout
    refused = _cli("search", "--index", f"{url}?field=title", "--query", query)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "does not analyze text as the flat index does" in refused.stderr
    answers, docs, _ = served([f"local={flat}", f"theirs={url}?field=body"], query)
    assert [(c["docid"], c["score"]) for c in answers[0]["candidates"]] == \
        [(c["docid"], c["score"]) for c in answers[1]["candidates"]]
    assert docs[0]["doc"] == docs[1]["doc"]
    assert _snapshot(client) == before
