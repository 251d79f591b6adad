"""Serving: ``bm25aug serve``, a REST API in Anserini's shape and an MCP server, micro-batched.

``config`` (what is served, the limits), ``service`` (the indexes and requests, protocol-free),
``batcher`` (concurrent requests into batch searches), ``rest`` (FastAPI) and ``mcp_tools`` (the
``mcp`` SDK). ``command`` starts either. Install with ``pip install 'bm25aug[serve]'``.
"""
