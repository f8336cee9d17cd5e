"""A latency profile for the simulator, made of what a real GPU was recorded to take.

The simulator sleeps per NVML C symbol (a :class:`~dra_driver.nvml.sim.faults.FaultPlan`'s
``latency``); a recording (``migdra hw record --latency-samples N``) holds how long the read-only
MIG queries took on real hardware, by the name of the timed call.  This module turns the one into
the other, so the simulator's NVML side can answer as slowly as that GPU did -- and a benchmark or a
test of caching sees the cost real NVML has (reads are ~5x slower on an H200 than simulated).

Only recorded numbers are used: a call the recording did not time (creating or destroying
instances, compute-instance queries, identity reads other than the UUID) gets no latency from the
profile, never a guess.  Add such latency explicitly (``MIGDRA_SIM_FAULTS`` ``latency``), saying
where the number came from.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from dra_driver.nvml.backend import INIT_SYMBOLS, TIMED_CALL_SYMBOLS
from dra_driver.nvml.recording import LATENCY_KEY, RecordedTiming
from dra_driver.nvml.sim.errors import LatencyProfileError, describe_validation_error

Percentile = Literal["p50", "p99"]

# A recording is a few hundred KiB; a far larger file is something else (and need not be read whole).
_MAX_RECORDING_BYTES = 16 * 1024 * 1024


def recorded_latency(recording: Path | Mapping[str, Any], percentile: Percentile = "p50") -> dict[str, float]:
    """Seconds per NVML C symbol that make simulated calls take as long as the recorded GPU's did.

    ``recording``: a recording file (``migdra hw record`` output, e.g. those in
    ``tests/golden/recordings``) or its parsed JSON.  Each timed call's ``percentile`` goes to the C
    symbols pynvml calls for it (:data:`~dra_driver.nvml.backend.TIMED_CALL_SYMBOLS`), split evenly
    where one sample made several C calls (a placements read asks twice: count, then placements, so
    each gets half and the pair takes the recorded time); ``nvmlInit_ms`` (one figure: the whole
    session open, library load included) goes to ``nvmlInitWithFlags`` for either percentile.

    Calls the recording did not time get no entry: creation and destruction of instances, compute-
    instance queries, and every identity query but ``nvmlDeviceGetUUID`` / ``GetHandleByIndex`` run
    at simulator speed.  Raises :class:`LatencyProfileError` (one line, naming the file) for a missing
    or unreadable file, one that is not JSON, has no latencies, or times a call migdra does not know.
    """
    source = f"latency recording {recording}" if isinstance(recording, Path) else "latency recording"
    raw = _read(recording, source) if isinstance(recording, Path) else recording
    if not isinstance(raw, Mapping) or LATENCY_KEY not in raw:
        raise LatencyProfileError(
            f"{source} holds no {LATENCY_KEY}; record one with `migdra hw record --latency-samples 200`"
        )
    try:
        timing = RecordedTiming.model_validate(raw)
    except ValidationError as e:
        raise LatencyProfileError(f"{source}: {describe_validation_error(e)}") from e
    latency: dict[str, float] = {}
    for name, recorded in timing.latency_us_p50_p99_read_only_calls.items():
        symbols = TIMED_CALL_SYMBOLS[name]
        micros = recorded.p50_us if percentile == "p50" else recorded.p99_us
        for symbol in symbols:
            latency[symbol] = micros / len(symbols) / 1e6
    if timing.nvmlInit_ms is not None:
        for symbol in INIT_SYMBOLS:
            latency[symbol] = timing.nvmlInit_ms / 1e3
    return latency


def _read(path: Path, source: str) -> Any:
    try:
        st = path.stat()
    except FileNotFoundError:
        raise LatencyProfileError(f"{source} does not exist; give a file written by `migdra hw record`") from None
    except OSError as e:
        raise LatencyProfileError(f"cannot read {source}: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise LatencyProfileError(f"{source} is a directory; give a file written by `migdra hw record`")
    if not stat.S_ISREG(st.st_mode):  # /dev/zero would be read forever
        raise LatencyProfileError(f"{source} is not a regular file")
    if st.st_size > _MAX_RECORDING_BYTES:
        raise LatencyProfileError(f"{source} is {st.st_size} bytes, larger than any recording")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise LatencyProfileError(f"{source} is not JSON (not UTF-8 text)") from None
    except OSError as e:
        raise LatencyProfileError(f"cannot read {source}: {e.strerror or e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise LatencyProfileError(f"{source} is not JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
