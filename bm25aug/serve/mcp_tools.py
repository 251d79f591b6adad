"""The MCP server: the same ``SearchService`` as tools an agent can call, built with the official
``mcp`` SDK (``MCPServer``), over stdio or streamable HTTP.

Tools: ``search``, ``search_terms`` (a weighted query: the index's terms and their weights),
``augment`` (the weighted term list and what the model changed), ``get_document`` and
``list_indexes``, as Pyserini's ``pyserini.server.mcp`` names its own. A refused request is a tool
error whose text is the one-line message the REST API sends; so is an argument of the wrong type
(the SDK's own text was pydantic's, over several lines with a URL). Over stdio every line is
answered (``bm25aug.serve.mcp_stdio``); over HTTP it runs on the same server as the REST API
(``bm25aug.serve.http_server``), behind the same Host and Origin checks (``bm25aug.serve.guard``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import StrictFloat, StrictInt

from bm25aug.serve.config import ServeConfig
from bm25aug.serve.service import METHODS, SearchService, ServeError

TRANSPORTS = ("stdio", "http")


def one_line(error) -> str:
    """A pydantic ``ValidationError`` as one line: the first argument it names, and the fix."""
    first = error.errors()[0] if error.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ())) or "an argument"
    more = f" (and {len(error.errors()) - 1} more)" if len(error.errors()) > 1 else ""
    return (f"{where}: {first.get('msg', 'invalid')}{more}; fix: pass the types the tool's inputSchema gives "
            f"(tools/list)")


def create_mcp(service: SearchService):
    """An ``MCPServer`` whose tools call ``service``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from pydantic import ValidationError

    class Server(MCPServer):
        async def call_tool(self, name, arguments, context=None):
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as e:
                if isinstance(e.__cause__, ValidationError):
                    raise ToolError(f"Error executing tool {name}: {one_line(e.__cause__)}") from e.__cause__
                raise

    names = ", ".join(sorted(service.backends))
    mcp = Server("bm25aug", log_level="WARNING", instructions=f"BM25 search with learned query augmentation over: {names}. "
                                            f"Call list_indexes first; search returns docids, scores and documents.")

    async def call(fn, *args):
        try:
            return await fn(*args)
        except ServeError as e:
            raise ToolError(e.message) from None

    @mcp.tool()
    async def search(index: str, query: str, hits: int = 10,
                     method: Literal[METHODS] | None = None) -> dict:
        """Search an index; candidates are {docid, score, rank, doc}, best first. method: bm25,
        augmented (where a model is loaded), dense or hybrid (where a dense model is); default: the
        last the index has."""
        return await call(service.search, index, query, hits, method)

    # Strict, as the REST body is (``TermsQuery``): a weight "1.5" or true, or hits "10", is refused,
    # not turned into a number; what is left is checked as REST checks it (``check_term_list``).
    @mcp.tool()
    async def search_terms(index: str, terms: dict[str, StrictFloat], hits: StrictInt = 10) -> dict:
        """Search an index with a weighted query, {term: weight}: the index's own terms, not analyzed
        (a flat index holds the English analyzer's stems, e.g. 'durabl'; augment shows a query's),
        each weight a number from 0 up (a boost). A term no document holds matches nothing. On a
        multifield index each term is searched on both fields, weighted as augmented searches.
        Candidates as search's."""
        return await call(service.search_terms, index, terms, hits)

    @mcp.tool()
    async def augment(index: str, query: str) -> dict:
        """How the model rewrites a query: its weighted terms, the terms it added, and the query's
        own terms with BM25's weight and the learned one."""
        return await call(service.augment, index, query)

    @mcp.tool()
    async def get_document(index: str, docid: str) -> dict:
        """The stored document with this docid."""
        return await call(service.document, index, docid)

    @mcp.tool()
    def list_indexes() -> dict:
        """The served indexes (``indexes``): name, size, flavor, model and search methods."""
        return {"indexes": service.indexes()}

    return mcp


def mcp_http_app(mcp, config: ServeConfig):
    """The streamable-HTTP app of ``mcp`` at ``/mcp``, behind the REST API's Host and Origin checks
    (the SDK's own check is off, so that the two transports apply one rule)."""
    from mcp.server.transport_security import TransportSecuritySettings

    from bm25aug.serve.guard import RequestGuard

    app = mcp.streamable_http_app(transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
                                  max_request_body_size=config.max_body_bytes, host=config.host)
    return RequestGuard(app, config, bodies=False)


def run_mcp(service: SearchService, transport: str, config: ServeConfig, sockets=()) -> None:
    """Serve the tools over ``stdio`` (the MCP client starts this process) or streamable ``http``
    on ``sockets`` (bound by the caller before the indexes were loaded)."""
    mcp = create_mcp(service)
    if transport == "stdio":
        import anyio

        from bm25aug.serve.mcp_stdio import serve_stdio

        anyio.run(serve_stdio, mcp)
        return
    from bm25aug.serve.http_server import HttpServer, url

    HttpServer(mcp_http_app(mcp, config), config, sockets, f"bm25aug MCP server on {url(sockets)}/mcp",
               on_deadline=service.stop_waiting).run()
