"""``bm25aug serve``: the settings from flags or a config file, the address bound, the indexes
and models loaded, then the REST or the MCP server until SIGINT/SIGTERM (``stopped``, exit 0)."""

from __future__ import annotations

import dataclasses
import logging
import os
import sys

from bm25aug.errors import UserError
from bm25aug.interrupts import installed
from bm25aug.serve.config import ServeConfig, index_specs, load_config

log = logging.getLogger(__name__)
# Flags that override a ServeConfig setting of the same name when given.
SETTINGS = [f.name for f in dataclasses.fields(ServeConfig) if f.name != "indexes"]


def config_from_args(args) -> ServeConfig:
    """``--config FILE`` or ``--index``/``--model`` flags, with any setting flag on top."""
    dense = getattr(args, "dense", None)
    if args.config and (args.index or args.model or dense):
        raise UserError("--config names the indexes itself; fix: drop --index/--model/--dense, or drop --config")
    overrides = {name: getattr(args, name) for name in SETTINGS if getattr(args, name, None) is not None}
    if args.config:
        return dataclasses.replace(load_config(args.config), **overrides)
    return ServeConfig(indexes=index_specs(args.index, args.model, dense), **overrides)


def _require_extra() -> None:
    try:
        import fastapi, mcp, uvicorn  # noqa: F401,E401
    except ImportError as e:
        raise UserError(f"serving needs {e.name}, which is not installed; fix: pip install 'bm25aug[serve]'") from None


def run(args) -> None:
    _require_extra()
    config = config_from_args(args)
    from bm25aug.serve.http_server import HttpServer, bind, url
    from bm25aug.serve.service import SearchService

    over_http = not args.mcp or args.transport == "http"
    # The address first: a port in use is one line now, not after every model has loaded.
    sockets = bind(config.host, config.port) if over_http else []
    try:
        service = SearchService(config)
        try:
            if args.mcp:
                from bm25aug.serve.mcp_tools import run_mcp

                run_mcp(service, args.transport, config, sockets)
            else:
                from bm25aug.serve.rest import create_app

                HttpServer(create_app(service), config, sockets, f"bm25aug REST API on {url(sockets)} (spec: "
                           f"/openapi.json, docs: /docs)", on_deadline=service.stop_waiting).run()
        finally:
            service.close(timeout=1.0)  # what was queued was answered 503 at the stop
    finally:
        for sock in sockets:
            sock.close()
    print("stopped", file=sys.stderr, flush=True)
    if installed():  # the command line: all is closed, and freeing the models' memory at exit took seconds
        sys.stdout.flush()
        os._exit(0)
