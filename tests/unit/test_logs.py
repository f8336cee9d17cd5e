"""The JSON log format: one valid JSON object per record, the context fields exactly where they are set,
an exception on the same line; and the text format unchanged."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from datetime import datetime

import pytest

from dra_driver import logs
from dra_driver.logs import JsonFormatter, LogFormat, LogSettings, log_context, render_announcement


@pytest.fixture
def capture() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger that writes JSON lines into a buffer; the process-wide node is restored afterwards."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tests.logs")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    saved = dict(logs._process_fields)
    logs._process_fields.clear()  # an in-process plugin of an earlier test may have set its node
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)
        logs._process_fields.clear()
        logs._process_fields.update(saved)


def lines(stream: io.StringIO) -> list[dict[str, str]]:
    text = stream.getvalue()
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_one_json_object_per_record_with_the_base_fields(capture: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = capture
    logger.info("prepared %s\nacross lines", "claim")
    logger.warning("second")
    (first, second) = lines(stream)
    assert first["message"] == "prepared claim\nacross lines"
    assert (first["level"], first["logger"]) == ("info", "tests.logs")
    assert second["level"] == "warning"
    assert first["time"].endswith("Z")  # RFC 3339, UTC
    assert datetime.fromisoformat(first["time"]).utcoffset() is not None


def test_context_fields_inside_a_claim_context_and_absent_outside(
    capture: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = capture
    logger.info("before")
    with log_context(claim_uid="uid-1", claim="default/a"):
        logger.info("claim")
        with log_context(gpu_uuid="GPU-1"):
            logger.info("device")
        logger.info("claim again")
    logger.info("after")
    before, claim, device, again, after = lines(stream)
    for line in (before, after):
        assert not set(line) & set(logs.CONTEXT_FIELDS)
    assert (claim["claim_uid"], claim["claim"]) == ("uid-1", "default/a")
    assert "gpu_uuid" not in claim
    assert "gpu_uuid" not in again
    assert (device["claim_uid"], device["gpu_uuid"]) == ("uid-1", "GPU-1")


def test_context_is_per_thread_and_the_node_is_per_process(capture: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = capture
    logs.set_node("node-1")
    with log_context(claim_uid="uid-1"):
        other = threading.Thread(target=logger.info, args=("elsewhere",))
        other.start()
        other.join()
    (line,) = lines(stream)
    assert line["node"] == "node-1"
    assert "claim_uid" not in line  # another thread's claim is not this line's


def test_an_exception_is_one_escaped_field_on_the_same_line(capture: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = capture
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.exception("failed")
    assert stream.getvalue().count("\n") == 1
    (line,) = lines(stream)
    assert line["message"] == "failed"
    assert "Traceback (most recent call last)" in line["exc"]
    assert "RuntimeError: boom" in line["exc"]


def test_an_unknown_context_field_is_refused() -> None:
    with pytest.raises(ValueError, match="not log context fields"), log_context(pod="x"):  # type: ignore[arg-type]
        pass


def test_the_announcement_is_a_json_line() -> None:
    line = json.loads(render_announcement("migdra kubelet-plugin: serving node node-1"))
    assert (line["level"], line["logger"], line["message"]) == (
        "info",
        "migdra",
        "migdra kubelet-plugin: serving node node-1",
    )


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({}, LogFormat.TEXT, id="default-text"),
        pytest.param({"MIGDRA_LOG_FORMAT": "json"}, LogFormat.JSON, id="env"),
    ],
)
def test_the_format_setting(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: LogFormat) -> None:
    monkeypatch.delenv("MIGDRA_LOG_FORMAT", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert LogSettings().log_format is expected
