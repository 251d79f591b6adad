"""The REST API: Anserini's (``io.anserini.api.RestServer``, Pyserini's ``pyserini.server.rest``
clients) routes and JSON shapes, plus bm25aug's own.

Anserini's ``/v1/{index}/search`` and ``/v1/{index}/doc/{docid}`` answer as its OpenAPI spec
says (``SearchResponse``, ``DocumentResponse``, errors as ``{"error": ...}``), so their clients work
unchanged. bm25aug adds ``method=bm25|augmented`` on search, ``/v1/{index}/augment`` (the term
list and what the model changed), ``/v1/indexes`` and ``/health``. The spec is served at
``/openapi.json``; every error, a malformed parameter too, is a 4xx ``{"error": ...}`` that it
documents (FastAPI's own 422 is answered as 400, as Anserini does).
"""

from __future__ import annotations

import json
import logging
from contextlib import asynccontextmanager
from typing import Any, Literal

from fastapi import FastAPI, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from bm25aug import __version__
from bm25aug.serve.service import API, SearchService, ServeError

log = logging.getLogger(__name__)


class QueryText(BaseModel):
    text: str


class Candidate(BaseModel):
    docid: str
    score: float
    rank: int = Field(ge=1)
    doc: Any = Field(description="the stored document: parsed JSON, or the raw string with parse=false")


class SearchResponse(BaseModel):
    api: str
    index: str
    method: str = Field(description="bm25aug: the method that ranked the candidates")
    query: QueryText
    candidates: list[Candidate]


class DocumentResponse(BaseModel):
    api: str
    index: str
    docid: str
    doc: Any


class Reweighted(BaseModel):
    bm25: float
    learned: float
    indexed: bool = Field(description="whether any document has the term (a term none has is never searched)")


class AugmentResponse(BaseModel):
    api: str
    index: str
    query: QueryText
    terms: dict[str, float] = Field(description="the weighted term list Lucene scores")
    added: dict[str, float] = Field(description="terms the model added, heaviest first")
    reweighted: dict[str, Reweighted] = Field(description="the query's own terms: BM25's weight and the learned one")


class IndexInfo(BaseModel):
    name: str
    index: str
    flavor: str
    num_docs: int
    model: str | None
    methods: list[str]
    default_method: str


class Health(BaseModel):
    status: str
    indexes: int
    uptime_s: float
    requests: int
    mean_batch: float


class ErrorResponse(BaseModel):
    error: str


ERRORS = {status: {"model": ErrorResponse, "description": what} for status, what in (
    (400, "Invalid request parameters"), (404, "Unknown index, document or route"),
    (500, "Internal server error (a fault of the server, never of the request)"))}
OVERLOADED = {503: {"model": ErrorResponse, "description": "Overloaded: the request queue is full",
                    "headers": {"Retry-After": {"description": "seconds to wait before retrying",
                                                "schema": {"type": "integer"}}}}}


def _json(body: dict | list, status: int = 200, headers: dict | None = None) -> Response:
    """JSON serialized once, without re-validating what the service built."""
    return Response(json.dumps(body, ensure_ascii=False, allow_nan=False), status, headers, "application/json")


def _error(e: ServeError) -> Response:
    headers = {"Retry-After": str(e.retry_after)} if e.retry_after else None
    return _json({"error": e.message}, e.status, headers)


def create_app(service: SearchService) -> FastAPI:
    """The app for ``service``; its lifespan closes the service after in-flight requests finish."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await run_in_threadpool(service.close)

    app = FastAPI(title="bm25aug REST API", version=__version__, lifespan=lifespan,
                  description="Anserini's REST API (search, documents) on BM25 with learned query augmentation.")

    @app.exception_handler(ServeError)
    async def serve_error(request: Request, e: ServeError) -> Response:
        return _error(e)

    @app.exception_handler(RequestValidationError)
    async def bad_parameter(request: Request, e: RequestValidationError) -> Response:
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or "a parameter"  # loc[0]: query, path, ...
        return _json({"error": f"{where}: {first.get('msg', 'invalid')}; fix: see /openapi.json for the "
                               f"parameter's type and range"}, 400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, e: StarletteHTTPException) -> Response:
        fix = "; fix: see /openapi.json for the routes" if e.status_code in (404, 405) else ""
        return _json({"error": f"{e.detail}{fix}"}, e.status_code, e.headers)  # a 405's Allow header too

    @app.exception_handler(Exception)
    async def internal_error(request: Request, e: Exception) -> Response:
        log.exception("internal error on %s", request.url.path)
        return _json({"error": f"internal error ({type(e).__name__}); fix: report it with the request"}, 500)

    names = sorted(service.backends)

    def index_path():  # the spec lists the served names; any other is answered 404
        return Path(description="a served index's name (GET /v1/indexes)", json_schema_extra={"enum": names})

    def query_param():
        return Query(description="the query text", max_length=service.config.max_query_chars)

    def parse_param():
        return Query(True, description="true: the stored document as parsed JSON; false: its raw string")

    @app.get(f"/{API}/{{index}}/search", response_model=SearchResponse, responses={**ERRORS, **OVERLOADED},
             tags=["anserini"],
             summary="Search an index")
    async def search(index: str = index_path(), query: str = query_param(),
                     hits: int = Query(10, ge=1, le=service.config.max_hits, description="number of hits"),
                     parse: bool = parse_param(),
                     method: Literal["bm25", "augmented"] | None = Query(
                         None, description="bm25aug: the ranking method (default: augmented where a model is loaded)"),
                     ) -> Response:
        return _json(await service.search(index, query, hits, method, parse))

    # {docid:path}: a docid may hold "/" (Wikipedia titles such as AC/DC in FEVER or HotpotQA)
    @app.get(f"/{API}/{{index}}/doc/{{docid:path}}", response_model=DocumentResponse, responses=ERRORS,
             tags=["anserini"], summary="Fetch a document by docid")
    async def document(index: str = index_path(), docid: str = Path(description="a document id of the index"),
                       parse: bool = parse_param()) -> Response:
        return _json(await service.document(index, docid, parse))

    @app.get(f"/{API}/{{index}}/augment", response_model=AugmentResponse, responses=ERRORS, tags=["bm25aug"],
             summary="The query as the model rewrites it: weighted terms, added and reweighted")
    async def augment(index: str = index_path(), query: str = query_param()) -> Response:
        return _json(await service.augment(index, query))

    @app.get(f"/{API}/indexes", response_model=list[IndexInfo], tags=["bm25aug"], summary="The served indexes")
    async def indexes() -> Response:
        return _json(service.indexes())

    @app.get("/health", response_model=Health, tags=["bm25aug"], summary="Liveness, and batching statistics")
    async def health() -> Response:
        return _json(service.health())

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
