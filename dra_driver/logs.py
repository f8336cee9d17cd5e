"""How every migdra process writes its log: the format (text or JSON lines) and the context fields.

Owns the ``MIGDRA_LOG_FORMAT`` setting, the formatter of each format, and the context a log line
carries without its call site naming it: ``claim_uid``, ``claim`` (namespace/name), ``node`` and
``gpu_uuid``.  The code that handles one claim wraps that work in :func:`log_context`; every line
logged inside it, on that thread (or in a task copied from its context), carries the fields, so no
log call repeats them and none forgets them.  The node is set once per process (:func:`set_node`).

Text (the default) is the format the CLI has always written -- tests and people read it.  JSON is
for a cluster's log pipeline: one object per line with ``time`` (RFC 3339, UTC), ``level``,
``logger``, ``message``, the context fields that are set, and an exception as one escaped ``exc``
string, so a traceback never spans lines.

Must never: read the environment itself (the settings model does), or log anything.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from enum import StrEnum

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from dra_driver.flags import flag

CONTEXT_FIELDS = ("claim_uid", "claim", "node", "gpu_uuid")
"""The context fields, in the order a JSON line lists them."""

_context: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("migdra_log_context", default=None)
# The node is the same for every thread of a process, so it is not a context variable: a thread
# started before it was set (a gRPC worker) still logs it.
_process_fields: dict[str, str] = {}

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class LogSettings(BaseSettings):
    """Settings of every command's log (flag of the ``migdra`` group or ``MIGDRA_*`` variable)."""

    model_config = SettingsConfigDict(env_prefix="MIGDRA_", extra="ignore", frozen=True)

    log_format: LogFormat = Field(
        default=LogFormat.TEXT,
        description="text: one human-readable line per record; json: one JSON object per line (time, level, "
        "logger, message, and claim_uid, claim, node, gpu_uuid where the line concerns them; an exception as "
        "one escaped exc field), for a cluster's log pipeline",
        json_schema_extra=flag(metavar="text|json"),
    )


def set_node(node: str) -> None:
    """This process's node, on every line from now on (the node plugin calls it once at start-up)."""
    _process_fields["node"] = node


@contextmanager
def log_context(**fields: str | None) -> Iterator[None]:
    """Lines logged inside the block carry ``fields`` (``None`` values are left out); nests, inner wins."""
    unknown = set(fields) - set(CONTEXT_FIELDS)
    if unknown:
        raise ValueError(f"not log context fields: {sorted(unknown)} (known: {', '.join(CONTEXT_FIELDS)})")
    token = _context.set({**(_context.get() or {}), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


def current_context() -> dict[str, str]:
    """The context fields a line logged here and now carries."""
    return {**_process_fields, **(_context.get() or {})}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (``json.dumps`` escapes every newline inside a value)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, str] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = current_context()
        line.update((name, context[name]) for name in CONTEXT_FIELDS if name in context)
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False)


def render_announcement(message: str, logger: str = "migdra") -> str:
    """A line a command prints whatever the log level (the plugin's "serving node ..."), as a JSON log line."""
    record = logging.LogRecord(logger, logging.INFO, "", 0, message, None, None)
    return JsonFormatter().format(record)


def configure_logging(settings: LogSettings, level: int) -> None:
    """The root logger writes to stderr in ``settings.log_format`` at ``level``.

    As :func:`logging.basicConfig` does: a root logger that already has handlers (a test's capture) is
    left alone."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if settings.log_format is LogFormat.JSON else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
