"""The server's log: JSON lines for log pipelines, or plain lines for a person.

Two kinds of line: the server's own (start, reloads, errors) through `logging`, and one
review line per admission request (`review_line`, logger `REVIEW_LOGGER`), which `serve`
writes with `JsonLines` straight to stderr (`ReviewWriter`): the same line through `logging`
costs several times as much (a LogRecord, the caller's frame, handler locks).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, BinaryIO

import orjson

from webhook.policy import names
from webhook.server import codec, metrics

# The logger of the review lines; their `logger` field.
REVIEW_LOGGER = "webhook.review"
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "text")

_review_logger = logging.getLogger(REVIEW_LOGGER)

# Where review lines go when not through `logging` (a `JsonLines`).
ReviewLog = Callable[[dict[str, Any]], None]


def review_line(
    outcome: codec.Outcome, endpoint: codec.Endpoint, policy_name: str, seconds: float
) -> dict[str, Any]:
    """The log line of one answered review."""
    request, summary = outcome.request, outcome.summary
    line: dict[str, Any] = {
        "message": "review",
        "uid": request.uid,
        "namespace": request.namespace,
        "name": request.name,
        "kind": request.kind,
        "operation": request.operation,
        "endpoint": endpoint,
        "policy": policy_name,
        "decision": metrics.ALLOWED if summary.allowed else metrics.DENIED,
        "patch_operations": summary.patch_operations,
        "ms": round(seconds * 1000, 3),
    }
    if not summary.allowed:
        line["rules"] = list(summary.rules)
        line["mode"] = names.ENFORCE
    if summary.would_refuse:
        # Admitted although these rules would refuse: the mode that decided so.
        line["would_refuse"] = list(summary.would_refuse)
    return line


class ReviewWriter:
    """Writes review lines: straight to `direct` when `serve` gives one, else through the
    logger REVIEW_LOGGER at INFO."""

    __slots__ = ("_direct",)

    def __init__(self, direct: ReviewLog | None) -> None:
        self._direct = direct

    @property
    def wanted(self) -> bool:
        """Whether review lines are written (asked before one is put together)."""
        return self._direct is not None or _review_logger.isEnabledFor(logging.INFO)

    def write(self, line: dict[str, Any]) -> None:
        if self._direct is not None:
            self._direct(line)
        else:
            _review_logger.info(line)


def _timestamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, then the message.

    A record whose message is a dict (the review lines, reload reports) has its keys merged
    into the object, so log pipelines get fields rather than text to parse.
    """

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        if isinstance(record.msg, dict):
            line.update(record.msg)
        else:
            line["message"] = record.getMessage()
        if record.exc_info:
            line["trace"] = self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class JsonLines:
    """Writes review lines to a binary stream, shaped as `JsonFormatter` shapes records.

    The head of a line (time, level, logger) is kept as bytes and made again only when the
    millisecond changes (the date and time of day only when the second does); the fields are
    one `orjson.dumps`. Lines are held and written
    together, at most `FLUSH_SECONDS` after the first of them (a write per line is a system
    call each), when `MAX_HELD_BYTES` are held, and at exit (`flush`). Each write is whole
    lines of at most `ATOMIC_WRITE_BYTES` (a longer line alone): standard error is often a
    pipe shared with other processes (a supervisor, a sidecar), and a pipe keeps a
    write of up to 4 KiB in one piece, so lines of different writers never mix.
    """

    FLUSH_SECONDS = 0.2
    MAX_HELD_BYTES = 64 * 1024
    # PIPE_BUF on Linux (POSIX guarantees 512).
    ATOMIC_WRITE_BYTES = 4096

    def __init__(self, stream: BinaryIO, *, logger_name: str = REVIEW_LOGGER) -> None:
        self._stream = stream
        self._tail = orjson.dumps({"level": "info", "logger": logger_name})[1:-1] + b","
        self._millisecond = self._second = -1
        self._prefix = self._head = b""
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._flush_due = False

    def __call__(self, line: dict[str, Any]) -> None:
        millisecond = int(time.time() * 1000)
        if millisecond != self._millisecond:
            self._millisecond = millisecond
            second, part = divmod(millisecond, 1000)
            if second != self._second:
                self._second = second
                self._prefix = b'{"time":"' + _timestamp(second)[:-10].encode()
            self._head = self._prefix + b".%03d+00:00\"," % part + self._tail
        body = orjson.dumps(line, default=str, option=orjson.OPT_APPEND_NEWLINE)
        data = self._head + body[1:] if len(body) > 3 else self._head[:-1] + b"}\n"
        self._held.append(data)
        self._held_bytes += len(data)
        if self._held_bytes >= self.MAX_HELD_BYTES:
            self.flush()
            return
        if self._flush_due:
            return
        try:
            asyncio.get_running_loop().call_later(self.FLUSH_SECONDS, self._flush_later)
        except RuntimeError:  # no event loop: write through
            self.flush()
            return
        self._flush_due = True

    def _flush_later(self) -> None:
        self._flush_due = False
        self.flush()

    def flush(self) -> None:
        """Write what is held, in whole lines of at most ATOMIC_WRITE_BYTES a write."""
        held, self._held, self._held_bytes = self._held, [], 0
        chunk: list[bytes] = []
        size = 0
        with contextlib.suppress(OSError, ValueError):
            for data in held:
                if chunk and size + len(data) > self.ATOMIC_WRITE_BYTES:
                    self._write(b"".join(chunk))
                    chunk, size = [], 0
                chunk.append(data)
                size += len(data)
            if chunk:
                self._write(b"".join(chunk))
            self._stream.flush()

    def _write(self, data: bytes) -> None:
        # A raw stream may write less than it is given (a signal, a full non-blocking pipe).
        view = memoryview(data)
        while view:
            written = self._stream.write(view)
            if not written:
                return
            view = view[written:]


class TextFormatter(logging.Formatter):
    """Plain lines for a person at a terminal; dict messages are shown as `key=value`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        if isinstance(record.msg, dict):
            fields = dict(record.msg)
            text = str(fields.pop("message", ""))
            extra = " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
            record.message = f"{text} {extra}".strip()
        return super().formatMessage(record)


def _text_value(value: object) -> str:
    if isinstance(value, str) and value and " " not in value:
        return value
    return orjson.dumps(value, default=str).decode()


class EveryFew:
    """Log one line now and then at most one every `seconds` on `log`, with how many were
    left out in between."""

    __slots__ = ("_last", "_left_out", "_log", "seconds")

    def __init__(self, log: logging.Logger, seconds: float) -> None:
        self._log = log
        self.seconds = seconds
        self._last = -seconds
        self._left_out = 0

    def due(self) -> int | None:
        """None when a line now would be too soon (it is counted as left out); else how
        many were left out since the last one."""
        now = time.monotonic()
        if now - self._last < self.seconds:
            self._left_out += 1
            return None
        left_out, self._left_out, self._last = self._left_out, 0, now
        return left_out

    def log(self, level: int, message: str, *args: object) -> None:
        left_out = self.due()
        if left_out is None:
            return
        if left_out:
            message += " (and %d more like it since the last such line)"
            args = (*args, left_out)
        self._log.log(level, message, *args)


class MalformedRequests(logging.Filter):
    """aiohttp's lines about requests it could not parse (a bad Content-Length, a header too
    long, not HTTP at all): one warning without the trace, at most one every `seconds`, with
    how many were left out. aiohttp logs each as an error with a traceback, so any client that
    reaches the port could fill the log with them (300 such requests: 300 tracebacks).
    Installed on the `aiohttp.server` logger by `configure_logging`."""

    def __init__(self, seconds: float = 10.0) -> None:
        super().__init__()
        self._every = EveryFew(logging.getLogger("aiohttp.server"), seconds)

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("Error handling request") or not record.exc_info:
            return True
        exc = record.exc_info[1]
        if exc is None or not _is_malformed(exc):
            return True  # a fault of the server: the trace is wanted
        left_out = self._every.due()
        if left_out is None:
            return False
        more = f" (and {left_out} more since the last such line)" if left_out else ""
        record.msg = f"refused a malformed request from %s: {type(exc).__name__}: %s{more}"
        args = record.args if isinstance(record.args, tuple) and record.args else ("unknown",)
        record.args = (args[0], str(exc)[:300])
        record.exc_info = None
        record.exc_text = None
        if record.levelno > logging.WARNING:  # aiohttp's debug lines stay debug
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def _is_malformed(exc: BaseException) -> bool:
    from aiohttp import http_exceptions  # noqa: PLC0415 - only when aiohttp logs one

    return isinstance(exc, http_exceptions.HttpProcessingError)


def configure_logging(level: str, log_format: str = "json") -> None:
    """Log lines to stderr (where container runtimes collect them) at `level`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, MalformedRequests) for f in server_log.filters):
        server_log.addFilter(MalformedRequests())
