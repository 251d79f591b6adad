"""The MCP server: the same ``SearchService`` as tools an agent can call, built with the official
``mcp`` SDK (``MCPServer``), over stdio or streamable HTTP.

Tools: ``search``, ``augment`` (the weighted term list and what the model changed),
``get_document`` and ``list_indexes``, as Pyserini's ``pyserini.server.mcp`` names its own. A
refused request is a tool error whose text is the one-line message the REST API sends.
"""

from __future__ import annotations

from typing import Literal

from bm25aug.serve.service import SearchService, ServeError

TRANSPORTS = ("stdio", "http")


def create_mcp(service: SearchService):
    """An ``MCPServer`` whose tools call ``service``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    names = ", ".join(sorted(service.backends))
    mcp = MCPServer("bm25aug", log_level="WARNING", instructions=f"BM25 search with learned query augmentation over: {names}. "
                                            f"Call list_indexes first; search returns docids, scores and documents.")

    async def call(fn, *args):
        try:
            return await fn(*args)
        except ServeError as e:
            raise ToolError(e.message) from None

    @mcp.tool()
    async def search(index: str, query: str, hits: int = 10,
                     method: Literal["bm25", "augmented"] | None = None) -> dict:
        """Search an index; candidates are {docid, score, rank, doc}, best first. method: augmented
        (default where a model is loaded) or bm25."""
        return await call(service.search, index, query, hits, method)

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


def run_mcp(service: SearchService, transport: str, host: str, port: int) -> None:
    """Serve the tools over ``stdio`` (the MCP client starts this process) or streamable ``http``."""
    mcp = create_mcp(service)
    try:
        if transport == "stdio":
            mcp.run("stdio")
        else:
            mcp.run("streamable-http", host=host, port=port)
    finally:
        service.close()
