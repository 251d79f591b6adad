"""``bm25aug serve``: the settings from flags or a config file, then the REST or the MCP server."""

from __future__ import annotations

import dataclasses
import logging
import sys

from bm25aug.errors import UserError
from bm25aug.serve.config import ServeConfig, index_specs, load_config

log = logging.getLogger(__name__)
# Flags that override a ServeConfig setting of the same name when given.
SETTINGS = [f.name for f in dataclasses.fields(ServeConfig) if f.name != "indexes"]


def config_from_args(args) -> ServeConfig:
    """``--config FILE`` or ``--index``/``--model`` flags, with any setting flag on top."""
    if args.config and (args.index or args.model):
        raise UserError("--config names the indexes itself; fix: drop --index/--model, or drop --config")
    overrides = {name: getattr(args, name) for name in SETTINGS if getattr(args, name, None) is not None}
    if args.config:
        return dataclasses.replace(load_config(args.config), **overrides)
    return ServeConfig(indexes=index_specs(args.index, args.model), **overrides)


def _require_extra() -> None:
    try:
        import fastapi, mcp, uvicorn  # noqa: F401,E401
    except ImportError as e:
        raise UserError(f"serving needs {e.name}, which is not installed; fix: pip install 'bm25aug[serve]'") from None


def run(args) -> None:
    _require_extra()
    config = config_from_args(args)
    from bm25aug.serve.service import SearchService

    service = SearchService(config)
    if args.mcp:
        from bm25aug.serve.mcp_tools import run_mcp

        if args.transport == "http":
            print(f"bm25aug MCP server on http://{config.host}:{config.port}/mcp", file=sys.stderr, flush=True)
        run_mcp(service, args.transport, config.host, config.port)
        return
    import uvicorn

    from bm25aug.serve.rest import create_app

    print(f"bm25aug REST API on http://{config.host}:{config.port} (spec: /openapi.json, docs: /docs)",
          file=sys.stderr, flush=True)
    # uvicorn handles SIGINT/SIGTERM itself: it stops accepting, lets in-flight requests finish
    # (up to the timeout), then the app's lifespan closes the batchers.
    uvicorn.run(create_app(service), host=config.host, port=config.port, log_level="warning", access_log=False,
                timeout_graceful_shutdown=config.shutdown_s)
