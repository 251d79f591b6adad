"""MCP over stdio that answers every line, as JSON-RPC 2.0 says.

The ``mcp`` SDK's stdio transport hands a line it cannot read to the session as an exception,
which drops it: a client waiting on that id waited for ever. So each line is read here first:

* not JSON (NaN and Infinity included): ``-32700`` Parse error, id null;
* a JSON-RPC batch (an array): MCP dropped batches in its 2025-06-18 revision, and this SDK
  speaks up to 2025-11-25, so a batch is refused: each request in it gets ``-32600`` Invalid
  Request with its own id, on its own line (an empty batch, or one with no request id, one
  ``-32600`` with id null); notifications in it get nothing, as JSON-RPC says;
* a string holding a lone UTF-16 surrogate (``\\ud800``), which is not Unicode text: ``-32602``
  Invalid params, with the request's id; a notification holding one is dropped with a log line
  (JSON-RPC never answers a notification);
* JSON that is no JSON-RPC message the SDK reads (no ``jsonrpc``, a bad id, nested deeper than
  the SDK's parser reads, ...): ``-32600``, with the id when there is a usable one.

Blank lines are skipped (they hold no message). Everything else goes to the SDK unchanged. No
line ends the server: the checks walk a message without recursion, and a ``RecursionError`` from
a deeply nested line is answered as the line's error.
"""

from __future__ import annotations

import io
import json
import logging
import sys

log = logging.getLogger(__name__)
MESSAGE_FIX = "fix: send one JSON-RPC 2.0 message (a JSON object) per line"


def _id(message) -> tuple[bool, object]:
    """Whether ``message`` is a request (has a usable id), and that id."""
    if isinstance(message, dict) and "id" in message:
        mid = message["id"]
        if (isinstance(mid, int) and not isinstance(mid, bool)) or isinstance(mid, str):
            return True, mid
    return False, None


def _not_number(constant: str):
    raise ValueError(f"{constant} is not a JSON number")


def _is_notification(message) -> bool:
    """A JSON-RPC notification: a method and no id (it is never answered)."""
    return isinstance(message, dict) and "method" in message and "id" not in message


def _has_surrogate(value) -> bool:
    """Whether any string in ``value`` (keys included) holds a lone surrogate; walked with an
    explicit stack, so that no nesting depth can exhaust Python's."""
    stack = [value]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def refusals(line: str) -> list[tuple[object, int, str]] | None:
    """``None`` when the SDK can take ``line`` as it is, else the errors to answer it with, as
    ``(id, code, message)`` (an empty list: nothing to answer, as for a blank line or a
    notification that cannot be read)."""
    from mcp_types.jsonrpc import INVALID_REQUEST, PARSE_ERROR

    if not line.strip():
        return []
    try:
        message = json.loads(line, parse_constant=_not_number)
    except (ValueError, RecursionError) as e:
        return [(None, PARSE_ERROR, f"Parse error: the line is not JSON ({str(e)[:120]}); {MESSAGE_FIX}")]
    try:
        return _message_refusals(line, message)
    except RecursionError:  # a check of a message nested deeper than Python's stack: the message, not the server
        return [(_id(message)[1], INVALID_REQUEST, f"Invalid Request: the message is nested too deeply to read; "
                                                   f"{MESSAGE_FIX}, nested less deeply")]


def _message_refusals(line: str, message) -> list[tuple[object, int, str]] | None:
    from mcp_types import jsonrpc_message_adapter
    from mcp_types.jsonrpc import INVALID_PARAMS, INVALID_REQUEST

    if isinstance(message, list):
        why = ("Invalid Request: JSON-RPC batches are not part of MCP since its 2025-06-18 revision; fix: send each "
               "message on its own line")
        answers = []
        for element in message or [None]:
            is_request, mid = _id(element)
            if is_request or not _is_notification(element):
                answers.append((mid, INVALID_REQUEST, why))  # a notification in it gets no answer
        return answers
    is_request, mid = _id(message)
    if _has_surrogate(message):
        if _is_notification(message):
            log.warning("dropped the notification %s: it holds a lone UTF-16 surrogate, which is not Unicode text (a "
                        "notification is never answered); fix: send valid Unicode (UTF-8) text",
                        ascii(message["method"])[:80])
            return []
        return [(mid, INVALID_PARAMS, "Invalid params: a string holds a lone UTF-16 surrogate (such as \\ud800), which "
                                      "is not Unicode text; fix: send valid Unicode (UTF-8) text")]
    try:
        jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError as e:
        if "recursion limit" in str(e):  # pydantic's JSON parser stops at a fixed depth
            return [(mid, INVALID_REQUEST, f"Invalid Request: the message is nested deeper than the MCP SDK reads; "
                                           f"{MESSAGE_FIX}, nested less deeply")]
        return [(mid, INVALID_REQUEST, f"Invalid Request: not a JSON-RPC 2.0 request, notification or response; "
                                       f"{MESSAGE_FIX} with jsonrpc, method and id")]
    return None


class _Unowned(io.TextIOWrapper):
    """stdin as text, without closing ``sys.stdin``'s buffer when it is collected."""

    def close(self) -> None:
        try:
            self.detach()
        except ValueError:
            pass


class _CheckedLines:
    """The lines of stdin that the SDK can read; the others are answered on ``write_stream``
    (the SDK's own, set once the transport is open)."""

    def __init__(self, lines):
        import anyio

        self.lines, self.write_stream, self.ready = lines, None, anyio.Event()

    def __aiter__(self):
        return self._lines()

    async def _lines(self):
        from mcp.shared.message import SessionMessage
        from mcp_types.jsonrpc import ErrorData, JSONRPCError

        async for line in self.lines:
            answers = refusals(line)
            if answers is None:
                yield line
                continue
            await self.ready.wait()
            for mid, code, text in answers:
                error = JSONRPCError(jsonrpc="2.0", id=mid, error=ErrorData(code=code, message=text))
                await self.write_stream.send(SessionMessage(error))


async def serve_stdio(mcp) -> None:
    """``mcp`` (an ``MCPServer``) over stdin and stdout, every line answered (module docstring)."""
    import anyio
    from mcp.server.stdio import stdio_server

    lines = _CheckedLines(anyio.wrap_file(_Unowned(sys.stdin.buffer, encoding="utf-8", errors="replace")))
    async with stdio_server(stdin=lines) as (read_stream, write_stream):
        lines.write_stream = write_stream
        lines.ready.set()
        server = mcp._lowlevel_server  # what MCPServer.run_stdio_async runs, on these streams
        await server.run(read_stream, write_stream, server.create_initialization_options())
