"""The REST API: Anserini's (``io.anserini.api.RestServer``, Pyserini's ``pyserini.server.rest``
clients) routes and JSON shapes, plus bm25aug's own.

Anserini's ``/v1/{index}/search`` and ``/v1/{index}/doc/{docid}`` answer as its OpenAPI spec
says (``SearchResponse``, ``DocumentResponse``, errors as ``{"error": ...}``), so their clients work
unchanged. bm25aug adds ``method=bm25|augmented`` on search, ``/v1/{index}/augment`` (the term
list and what the model changed), ``/v1/indexes`` and ``/health``. The spec is served at
``/openapi.json``; every error, a malformed parameter too, is a 4xx ``{"error": ...}`` that it
documents (FastAPI's own 422 is answered as 400, as Anserini does). ``POST /v1/{index}/search``
takes a weighted query, ``{"terms": {term: weight}, "hits": n}``, searched as
``BM25Searcher.search_terms`` does. A search whose client hangs up before it is answered is
cancelled (a search still queued is never run). ``bm25aug.serve.guard`` checks the Host, the
Origin and the body's size before any route.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Awaitable, Literal

from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from bm25aug import __version__
from bm25aug.limits import JAVA_INT_MAX
from bm25aug.serve.guard import RequestGuard
from bm25aug.serve.schemas import (ERRORS, OVERLOADED, TOO_LARGE, UNHEALTHY, AugmentResponse, DocumentResponse, Health,
                                   IndexInfo, SearchResponse, TermsQuery)
from bm25aug.serve.service import API, LARGE, METHODS, SearchService, ServeError

log = logging.getLogger(__name__)


def _json(body: dict | list, status: int = 200, headers: dict | None = None) -> Response:
    """JSON serialized once, without re-validating what the service built."""
    return Response(json.dumps(body, ensure_ascii=False, allow_nan=False), status, headers, "application/json")


def _dumps_search(body: dict) -> str:
    """A search answer as JSON a candidate at a time, so that the thread encoding it lets go of the
    GIL between them (one ``json.dumps`` of a thousand documents held it, and the event loop, throughout)."""
    head = json.dumps({k: v for k, v in body.items() if k != "candidates"}, ensure_ascii=False, allow_nan=False)
    parts = [json.dumps(c, ensure_ascii=False, allow_nan=False) for c in body["candidates"]]
    return f'{head[:-1]}, "candidates": [{", ".join(parts)}]}}'


async def _search_answer(service: SearchService, body: dict) -> Response:
    """A search answer; a large one encoded on the service's threads."""
    if len(body["candidates"]) <= LARGE:
        return _json(body)
    return Response(await service.offload(_dumps_search, body), 200, None, "application/json")


def _error(e: ServeError) -> Response:
    headers = {"Retry-After": str(e.retry_after)} if e.retry_after else None
    return _json({"error": e.message}, e.status, headers)


class ClientGone(Exception):
    """The client hung up before its answer: nothing is sent."""


async def _hung_up(receive) -> None:
    """Return once the client has closed its connection (the ASGI receive channel says so)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_gone(request: Request, work: Awaitable):
    """``work``'s answer, unless the client hangs up first: then ``work`` is cancelled, so that a
    search still queued is never run (one client's abandoned searches starved the others)."""
    task, gone = asyncio.ensure_future(work), asyncio.ensure_future(_hung_up(request.receive))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this handler is itself cancelled
        gone.cancel()
        if not task.done():
            task.cancel()
    if task.done() and not task.cancelled():
        return task.result()
    raise ClientGone


# What Starlette says of a body that json.loads refuses (malformed, nested too deep, invalid UTF-8).
_UNPARSED = "There was an error parsing the body"


def _add_error_handlers(app: FastAPI) -> None:
    """Every error the app answers, as the one-line JSON error with its fix (a 4xx, never a traceback)."""

    @app.exception_handler(ClientGone)
    @app.exception_handler(ClientDisconnect)
    async def gone(request: Request, e: Exception) -> Response:
        return Response(status_code=499)  # never written: the connection is closed

    @app.exception_handler(ServeError)
    async def serve_error(request: Request, e: ServeError) -> Response:
        return _error(e)

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(request: Request, e: RequestValidationError) -> Response:
        first = e.errors()[0] if e.errors() else {}
        loc = [str(p) for p in first.get("loc", ())]  # loc[0]: query, path, body
        where = ".".join(loc[1:]) or ("the JSON body" if loc[:1] == ["body"] else "a parameter")
        fix = ("send {\"terms\": {term: weight}, \"hits\": n} as JSON (see /openapi.json)" if loc[:1] == ["body"]
               else "see /openapi.json for the parameter's type and range")
        return _json({"error": f"{where}: {first.get('msg', 'invalid')}; fix: {fix}"}, 400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> Response:
        fix = "; fix: see /openapi.json for the routes" if e.status_code in (404, 405) else ""
        headers = dict(e.headers or {})
        if e.status_code == 405:  # every method of the path (Starlette names the first route's only: GET, not POST)
            methods = {m for route in app.routes if isinstance(route, APIRoute) and route.path_regex.match(
                request.url.path) for m in route.methods}
            headers["Allow"] = ", ".join(sorted(methods)) or headers.get("Allow", "")
        if e.status_code == 400 and e.detail == _UNPARSED:
            fix = ("; fix: send the body as UTF-8 JSON, {\"terms\": {term: weight}, \"hits\": n}, nested at most a "
                   "few levels (see /openapi.json)")
            return _json({"error": f"the body is not JSON this server can read (malformed, invalid UTF-8, or nested "
                                   f"too deep){fix}"}, 400, headers)
        return _json({"error": f"{e.detail}{fix}"}, e.status_code, headers)

    @app.exception_handler(Exception)
    async def internal_error(request: Request, e: Exception) -> Response:
        log.exception("internal error on %s", request.url.path)
        return _json({"error": f"internal error ({type(e).__name__}); fix: report it with the request"}, 500)


def create_app(service: SearchService) -> FastAPI:
    """The app for ``service`` (which the caller closes)."""
    app = FastAPI(title="bm25aug REST API", version=__version__,
                  description="Anserini's REST API (search, documents) on BM25 with learned query augmentation.")
    app.add_middleware(RequestGuard, config=service.config)
    _add_error_handlers(app)
    names = sorted(service.backends)

    def index_path():  # the spec lists the served names; any other is answered 404
        return Path(description="a served index's name (GET /v1/indexes)", json_schema_extra={"enum": names})

    def query_param():
        return Query(description="the query text", max_length=service.config.max_query_chars)

    def parse_param():
        return Query(True, description="true: the stored document as parsed JSON; false: its raw string")

    hits_text = (f"number of hits (as in Anserini, at most the index's size are answered; over this server's "
                 f"limit of {service.config.max_hits:,}: a 400)")

    @app.get(f"/{API}/{{index}}/search", response_model=SearchResponse, responses={**ERRORS, **OVERLOADED},
             tags=["anserini"],
             summary="Search an index")
    async def search(request: Request, index: str = index_path(), query: str = query_param(),
                     hits: int = Query(10, ge=1, le=JAVA_INT_MAX, description=hits_text),
                     parse: bool = parse_param(),
                     method: Literal[METHODS] | None = Query(
                         None, description="bm25aug: the ranking method (default: the index's last of bm25, "
                                           "augmented where a model is loaded, hybrid where a dense model is)"),
                     ) -> Response:
        return await _search_answer(service, await unless_gone(request, service.search(index, query, hits, method,
                                                                                       parse)))

    @app.post(f"/{API}/{{index}}/search", response_model=SearchResponse,
              responses={**ERRORS, **OVERLOADED, **TOO_LARGE}, tags=["bm25aug"],
              summary="Search with a weighted query: the index's terms and their weights (BM25 with boosts)")
    async def search_terms(request: Request, body: TermsQuery, index: str = index_path()) -> Response:
        return await _search_answer(service, await unless_gone(request, service.search_terms(
            index, body.terms, body.hits, body.parse)))

    # {docid:path}: a docid may hold "/" (Wikipedia titles such as AC/DC in FEVER or HotpotQA)
    @app.get(f"/{API}/{{index}}/doc/{{docid:path}}", response_model=DocumentResponse, responses={**ERRORS, **OVERLOADED},
             tags=["anserini"], summary="Fetch a document by docid")
    async def document(index: str = index_path(), docid: str = Path(description="a document id of the index"),
                       parse: bool = parse_param()) -> Response:
        return _json(await service.document(index, docid, parse))

    @app.get(f"/{API}/{{index}}/augment", response_model=AugmentResponse, responses={**ERRORS, **OVERLOADED}, tags=["bm25aug"],
             summary="The query as the model rewrites it: weighted terms, added and reweighted")
    async def augment(index: str = index_path(), query: str = query_param()) -> Response:
        return _json(await service.augment(index, query))

    @app.get(f"/{API}/indexes", response_model=list[IndexInfo], tags=["bm25aug"], summary="The served indexes")
    async def indexes() -> Response:
        return _json(service.indexes())

    @app.get("/health", response_model=Health, responses=UNHEALTHY, tags=["bm25aug"],
             summary="Liveness, batching statistics, and indexes found unavailable")
    async def health() -> Response:
        answer = service.health()  # 503 while an index is unavailable, so that a load balancer routes around it
        if answer["status"] == "ok":
            return _json(answer)
        return _json(answer, 503, {"Retry-After": str(service.config.retry_after)})

    _document_errors_only(app)
    return app


def _document_errors_only(app: FastAPI) -> None:
    """The spec lists the 400 that bad parameters get, not FastAPI's default 422."""
    build = app.openapi

    def openapi() -> dict:
        if app.openapi_schema is None:
            spec = build()
            for path in spec.get("paths", {}).values():
                for operation in path.values():
                    if operation.get("responses", {}).pop("422", None) is not None:
                        operation["responses"].setdefault("400", {
                            "description": "Invalid request parameters",
                            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}})
            for name in ("HTTPValidationError", "ValidationError"):
                spec.get("components", {}).get("schemas", {}).pop(name, None)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi
