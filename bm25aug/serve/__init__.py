"""Serving: ``bm25aug serve``, a REST API in Anserini's shape and an MCP server, micro-batched.

``config`` (what is served, the limits), ``service`` (the indexes and requests, protocol-free;
``bm25aug.search.term_lists`` checks a client's weighted query), ``batcher`` (concurrent
requests into batch searches), ``rest`` (FastAPI; ``schemas`` its JSON shapes) and
``mcp_tools`` (the ``mcp`` SDK; ``mcp_stdio`` its stdio lines). Both HTTP apps run on
``http_server`` (uvicorn: bound before loading, a stop that answers every request), behind
``guard`` (Host, Origin, body size) and ``connections`` (request timeout, connection cap).
``command`` starts either. Install with ``pip install 'bm25aug[serve]'``.
"""
