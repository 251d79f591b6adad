"""The REST API's JSON shapes, for its OpenAPI spec: Anserini's (``SearchResponse``,
``DocumentResponse``, ``{"error": ...}``) and bm25aug's own (the weighted-term body, ``/augment``,
``/v1/indexes``, ``/health``). The service builds the answers; these describe them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from bm25aug.limits import JAVA_INT_MAX
from bm25aug.limits import MAX_TERM_WEIGHT


class QueryText(BaseModel):
    text: str
    terms: dict[str, float] | None = Field(None, description="bm25aug, a weighted-term search: the term list searched")


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


class TermsQuery(BaseModel):
    """A weighted query: the index's own terms with their weights, searched as Lucene boosts."""

    model_config = ConfigDict(extra="forbid", strict=True)
    terms: dict[str, Annotated[float, Field(ge=0, le=MAX_TERM_WEIGHT, allow_inf_nan=False)]] = Field(
        min_length=1, description="{term: weight}: the index's terms as they are, not analyzed (a flat index holds "
                                  "the English analyzer's stems, e.g. 'durabl'); a term no document holds matches "
                                  "nothing; at least one weight above 0",
        examples=[{"vitamin": 1.2, "b12": 2.0, "defici": 1.0}],
        # no index term holds whitespace or a control character (checked with a message of its own)
        json_schema_extra={"propertyNames": {"pattern": r"^[^\s\x00-\x1f\x7f-\x9f]+$"}})
    hits: int = Field(10, ge=1, le=JAVA_INT_MAX, description="number of hits")
    parse: bool = Field(True, description="true: the stored document as parsed JSON; false: its raw string")


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
    dense: str | None = None  # the dense model of methods dense and hybrid
    methods: list[str]
    default_method: str


class Health(BaseModel):
    status: str
    indexes: int
    uptime_s: float
    requests: int
    mean_batch: float
    problems: dict[str, str] = {}  # index name: why it is unavailable (status "unavailable")


class ErrorResponse(BaseModel):
    error: str


ERRORS = {status: {"model": ErrorResponse, "description": what} for status, what in (
    (400, "Invalid request parameters"), (404, "Unknown index, document or route"),
    (500, "Internal server error (a fault of the server, never of the request)"))}
OVERLOADED = {503: {"model": ErrorResponse, "description": "Overloaded (the request queue is full), stopping, or the "
                    "index unavailable (its cluster does not answer, or it changed under the server)",
                    "headers": {"Retry-After": {"description": "seconds to wait before retrying",
                                                "schema": {"type": "integer"}}}}}
TOO_LARGE = {413: {"model": ErrorResponse, "description": "The request body is over the server's limit"}}
UNHEALTHY = {503: {"model": Health, "description": "An index is unavailable (status \"unavailable\", its reason "
                   "in problems)", "headers": OVERLOADED[503]["headers"]}}
