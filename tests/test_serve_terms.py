"""Weighted queries over the wire (issue 45): ``POST /v1/{index}/search`` with ``{"terms": {term:
weight}, "hits": n}`` and the MCP tool ``search_terms`` give the hits ``BM25Searcher.search_terms``
gives for that list, alone and micro-batched; a term list Lucene cannot search is a 4xx one-liner."""

from __future__ import annotations

import asyncio
import json
import threading

import httpx
import pytest

from bm25aug.serve.config import IndexSpec, ServeConfig

QUERIES = ["vitamin B12 deficiency causes neurological damage", "ALDH1 expression breast cancer prognosis",
           "0-dimensional biomaterials show inductive properties", "statins reduce mortality"]


@pytest.fixture(scope="module")
def searcher(scifact_flat):
    from bm25aug.search.bm25 import BM25Searcher

    return BM25Searcher(scifact_flat)


@pytest.fixture(scope="module")
def service(scifact_flat):
    from bm25aug.serve.service import SearchService

    service = SearchService(ServeConfig(indexes=[IndexSpec("s", str(scifact_flat))], workers=1, max_terms=64,
                                        max_body_bytes=4096))
    yield service
    service.close()


@pytest.fixture(scope="module")
def term_lists(searcher) -> list[dict[str, float]]:
    """The queries' own index terms with varied weights, one term no document holds, one weight 0."""
    lists = []
    for i, query in enumerate(QUERIES * 4):
        terms = {t: 0.25 + ((i + j) % 5) * 0.6 for j, t in enumerate(searcher.query_terms(query))}
        lists.append({**terms, "zzqqxnotaterm": 1.0, "cell": 0.0})
    return lists


def post(service, path: str, bodies: list, raw: bool = False) -> list[httpx.Response]:
    """Concurrent POSTs to the REST app of ``service``."""
    from bm25aug.serve.rest import create_app

    async def run():
        transport = httpx.ASGITransport(app=create_app(service))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60) as client:
            return await asyncio.gather(*(client.post(path, content=b, headers={"content-type": "application/json"})
                                          if raw else client.post(path, json=b) for b in bodies))
    return asyncio.run(run())


def hits_of(body: dict) -> list[tuple[str, float]]:
    return [(c["docid"], c["score"]) for c in body["candidates"]]


def test_rest_terms_give_the_hits_of_search_terms(service, searcher, term_lists):
    for terms, k in zip(term_lists[:4], (1, 10, 100, 1000)):
        response = post(service, "/v1/s/search", [{"terms": terms, "hits": k}])[0]
        assert response.status_code == 200, response.text
        body = response.json()
        assert hits_of(body) == [(h.docid, h.score) for h in searcher.search_terms(terms, k)]
        assert body["method"] == "bm25" and body["query"]["terms"] == terms and len(body["candidates"]) <= k
    raw = post(service, "/v1/s/search", [{"terms": {"vitamin": 1}, "hits": 1, "parse": False}])[0].json()
    assert isinstance(raw["candidates"][0]["doc"], str)


def test_micro_batched_terms_give_each_list_its_own_hits(service, searcher, term_lists):
    """The worker is held, so the 16 requests queue and are searched together
    (``batch_search_terms_arrays``): each still equals its own ``search_terms``."""
    batcher, release, sizes = service.backends["s"].batchers["terms"], threading.Event(), []
    search = batcher.search
    batcher.search = lambda lists, k: (sizes.append(len(lists)), release.wait(30), search(lists, k))[2]
    threading.Timer(1.0, release.set).start()
    try:
        responses = post(service, "/v1/s/search", [{"terms": t, "hits": 20} for t in term_lists])
    finally:
        batcher.search = search
    for terms, response in zip(term_lists, responses):
        assert hits_of(response.json()) == [(h.docid, h.score) for h in searcher.search_terms(terms, 20)]
    assert max(sizes) > 1, sizes  # searched as a batch, not one by one


def test_mcp_search_terms_gives_the_hits_of_search_terms(service, searcher, term_lists):
    from mcp.server.mcpserver.exceptions import ToolError

    from bm25aug.serve.mcp_tools import create_mcp

    mcp = create_mcp(service)
    result = asyncio.run(mcp.call_tool("search_terms", {"index": "s", "terms": term_lists[1], "hits": 10}))
    body = json.loads(result.content[0].text)
    assert hits_of(body) == [(h.docid, h.score) for h in searcher.search_terms(term_lists[1], 10)]
    with pytest.raises(ToolError) as refused:
        asyncio.run(mcp.call_tool("search_terms", {"index": "s", "terms": {"cell": -1.0}}))
    assert "\n" not in str(refused.value) and "fix:" in str(refused.value)


TOO_MANY = json.dumps({"terms": {f"t{i}": 1.0 for i in range(65)}})


@pytest.mark.parametrize("body, status, says", [
    ('{"terms": {}}', 400, "terms"),
    ('{"terms": {"cell": -1}}', 400, "greater than or equal to 0"),
    ('{"terms": {"cell": NaN}}', 400, "finite"),
    ('{"terms": {"cell": 1e999}}', 400, "finite"),
    # schemathesis's boundary case: a boost just under float32's largest made Lucene's scores infinite (a 500)
    ('{"terms": {"cell": 2.0, "0": 3.4028234663852882e+38}}', 400, "less than or equal to 1000000"),
    ('{"terms": {"cell": "2"}}', 400, "number"),
    ('{"terms": {"cell": true}}', 400, "number"),
    ('{"terms": {"cell line": 1}}', 400, "whitespace"),
    ('{"terms": {"cell\\u0001": 1}}', 400, "control"),
    ('{"terms": {"\\ud800": 1}}', 400, "surrogate"),
    ('{"terms": {"cell": 0}}', 400, "above 0"),
    (TOO_MANY, 400, "limit of 64"),
    ('{"terms": {"cell": 1}, "hit": 5}', 400, "hit"),
    ('{"terms": {"cell": 1}, "hits": 0}', 400, "hits"),
    ('{"terms": ["cell"]}', 400, "terms"),
    ('{"terms": {"cell": 1}', 400, "JSON"),
    ('{"terms": {"' + "a" * 5000 + '": 1}}', 413, "limit of 4,096"),
])
def test_a_bad_term_list_is_a_4xx_one_line(service, body, status, says):
    response = post(service, "/v1/s/search", [body.encode()], raw=True)[0]
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert says in error and "fix" in error and "\n" not in error, error


def test_a_chunked_body_over_the_limit_is_a_413(service):
    """A body without a length is counted as it arrives (FastAPI made it a 400 'error parsing the body')."""
    from bm25aug.serve.rest import create_app

    async def body():
        yield b'{"terms": {"'
        for _ in range(5):
            yield b"a" * 1000
        yield b'": 1}}'

    async def run():
        transport = httpx.ASGITransport(app=create_app(service))
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=60) as client:
            return await client.post("/v1/s/search", content=body(), headers={"content-type": "application/json"})

    response = asyncio.run(run())
    assert response.status_code == 413 and "limit of 4,096" in response.json()["error"]


@pytest.mark.parametrize("terms, hits", [({"cell": "1.5"}, 10), ({"cell": True}, 10), ({"cell": 1.0}, "10"),
                                         ({"cell": 1.0}, True)])
def test_mcp_search_terms_refuses_the_types_rest_refuses(service, terms, hits):
    """pydantic's lax mode turned "1.5" and true into numbers for MCP, where REST answers 400."""
    from mcp.server.mcpserver.exceptions import ToolError

    from bm25aug.serve.mcp_tools import create_mcp

    assert post(service, "/v1/s/search", [{"terms": terms, "hits": hits}])[0].status_code == 400
    with pytest.raises(ToolError) as refused:
        asyncio.run(create_mcp(service).call_tool("search_terms", {"index": "s", "terms": terms, "hits": hits}))
    assert "\n" not in str(refused.value) and "fix:" in str(refused.value), refused.value
    answer = asyncio.run(create_mcp(service).call_tool("search_terms", {"index": "s", "terms": {"cell": 2}, "hits": 3}))
    assert len(json.loads(answer.content[0].text)["candidates"]) == 3  # a whole number is a weight, as in REST


# "felines" and "astronomy" are only in titles of the tiny corpus; "cats" in a title and in texts.
MULTIFIELD_QUERIES = ["felines", "astronomy telescope", "big cats lions", "cat on a mat", "weather rain"]


@pytest.fixture(scope="module")
def multifield(tmp_path_factory, flat_model):
    """A tiny multifield index served with an untrained flat model."""
    from bm25aug.data.registry import load_dataset
    from bm25aug.lucene.index import ensure_index
    from bm25aug.serve.service import SearchService
    from conftest import write_beir

    root = tmp_path_factory.mktemp("serve_mf")
    index = ensure_index(load_dataset(str(write_beir(root / "tiny"))), "multifield", root / "indexes")
    flat_model.save_pretrained(root / "model")
    service = SearchService(ServeConfig(indexes=[IndexSpec("m", str(index), str(root / "model"))], workers=1,
                                        runtime="torch-fp32"))
    yield service
    service.close()


def test_augment_terms_posted_back_rank_as_augmented_on_multifield(multifield):
    """A weighted term list is the query side's output: on a multifield index it is searched with
    the field weights of ``method=augmented`` (contents 1, title 0.25), not plain BM25's 1 and 1,
    alone and micro-batched, and ``query.text`` is the field-weighted query searched."""
    from bm25aug.lucene.term_query import query_syntax
    from bm25aug.search.augmented import AUGMENTED_FIELD_WEIGHTS

    lists = [asyncio.run(multifield.augment("m", q))["terms"] for q in MULTIFIELD_QUERIES]
    augmented = [hits_of(asyncio.run(multifield.search("m", q, 5, "augmented"))) for q in MULTIFIELD_QUERIES]
    plain = [hits_of(asyncio.run(multifield.search("m", q, 5, "bm25"))) for q in MULTIFIELD_QUERIES]
    assert augmented[0] and augmented != plain  # the title weight matters on these queries
    for terms, expected in zip(lists, augmented):
        body = post(multifield, "/v1/m/search", [{"terms": terms, "hits": 5}])[0].json()
        assert hits_of(body) == expected, terms
        text = body["query"]["text"]
        assert text == query_syntax(terms, AUGMENTED_FIELD_WEIGHTS)
        assert text.startswith("(contents:") and "(title:" in text and text.endswith(")^0.25"), text
    batcher, release, sizes = multifield.backends["m"].batchers["terms"], threading.Event(), []
    search = batcher.search
    batcher.search = lambda lists, k: (sizes.append(len(lists)), release.wait(30), search(lists, k))[2]
    threading.Timer(1.0, release.set).start()
    try:
        responses = post(multifield, "/v1/m/search", [{"terms": t, "hits": 5} for t in lists * 3])
    finally:
        batcher.search = search
    assert [hits_of(r.json()) for r in responses] == augmented * 3 and max(sizes) > 1
