"""Scores on a cluster against scores in our process before Anserini's 4-decimal rounding (issue 60
item 4): bit for bit on OpenSearch 3.x, to float32 rounding on 2.x (``test_cluster``,
``test_reliability_five_cluster_index``); and ``served``: what ``bm25aug serve`` answers for a
folder and a cluster URL side by side (``test_cluster``, ``test_cluster_user_index``)."""

from __future__ import annotations

import numpy as np


def unrounded_tops(local_index, cluster_index, items: list, k: int = 100) -> list[tuple[dict, dict]]:
    """Each query's top ``k`` with Lucene's own float32 scores, before Anserini's rounding, as
    ``{docid: score}`` in our process and on the cluster (its answer as the searcher reads it,
    divided by the engine's scale). ``items``: (the Java query here, the pairs the cluster searches)."""
    tops = []
    for query, pairs in items:
        docs, scores = local_index.raw_top(query, k)
        request = cluster_index.search_request(pairs, k)
        hits = cluster_index.client.request(request.method, request.path, request.body,
                                            params=request.params)["hits"]["hits"]
        theirs = np.asarray([h["_score"] for h in hits], np.float32) / cluster_index.scale
        tops.append((dict(zip(local_index.docids[docs].tolist(), scores)),
                     dict(zip(map(cluster_index.layout.hit_id, hits), theirs))))
    return tops


def assert_unrounded_parity(tops: list[tuple[dict, dict]], exact: bool, k: int = 100) -> int:
    """``exact``: every query's top ``k`` scores, and each document's that both sides hold, equal
    bit for bit (OpenSearch 3.x: Lucene's BM25Similarity); else equal to float32 rounding (2.x
    scores (1 + k1) times higher, divided back). How many queries are equal bit for bit."""
    bits = 0
    for ours, theirs in tops:
        a, b = (np.sort(np.asarray(list(t.values()), np.float32))[::-1][:k] for t in (ours, theirs))
        common = sorted(ours.keys() & theirs.keys())
        same = a.tobytes() == b.tobytes() and all(ours[d] == theirs[d] for d in common)
        if exact:
            assert same, f"scores differ: {[(d, ours[d], theirs[d]) for d in common if ours[d] != theirs[d]][:3]}"
        else:
            np.testing.assert_allclose(a, b, rtol=2 ** -21)  # a few float32 units in the last place
        bits += same
    return bits


def served(index_flags: list[str], query: str, missing: str | None = None) -> tuple[list[dict], list[dict], int | None]:
    """``bm25aug serve --index`` each of ``index_flags`` (``NAME=PATH``), in process: each index's
    answer to ``query`` (top 10), each one's document of the last index's first hit, and the
    status of asking the last index for the document ``missing`` (None when not given)."""
    import asyncio

    import httpx

    from bm25aug.serve.config import ServeConfig, index_specs
    from bm25aug.serve.rest import create_app
    from bm25aug.serve.service import SearchService

    service = SearchService(ServeConfig(indexes=index_specs(index_flags, None), workers=1))
    names = [flag.split("=", 1)[0] for flag in index_flags]

    async def run():
        transport = httpx.ASGITransport(app=create_app(service))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
            answers = [(await http.get(f"/v1/{name}/search", params={"query": query, "hits": 10})).json()
                       for name in names]
            docid = answers[-1]["candidates"][0]["docid"]
            docs = [(await http.get(f"/v1/{name}/doc/{docid}")).json() for name in names]
            status = None if missing is None else (await http.get(f"/v1/{names[-1]}/doc/{missing}")).status_code
            return answers, docs, status

    try:
        return asyncio.run(run())
    finally:
        service.close()
