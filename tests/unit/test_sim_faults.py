"""Fault injection and latency of the simulated NVML, per C symbol, seen through pynvml.

A rule fails exactly the calls it names with the named ``NVMLError_*`` class and changes nothing;
latency delays only its symbol and is slept outside the state lock; plans reach subprocesses via the
environment (``MIGDRA_SIM_FAULTS``, read by the NVML settings and passed to ``install``).  That
``kill_before`` / ``kill_after`` crash a process before / after the call is persisted is
tests/integration/test_sim_faults_kill.py (it starts processes).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pydantic
import pynvml
import pytest

from dra_driver.nvml import sim
from dra_driver.nvml.session import open_nvml
from dra_driver.nvml.settings import build_nvml_settings
from tests.conftest import Boot

pytestmark = pytest.mark.usefixtures("boot")


def gi_count(state_path: Path) -> int:
    return sum(len(gpu.gpu_instances) for gpu in sim.snapshot(state_path).gpus)


def test_nth_call_fails_with_the_named_error_and_changes_nothing(boot: Boot, state_path: Path) -> None:
    plan = {"rules": [{"symbol": "nvmlDeviceCreateGpuInstance", "nth": 2, "error": "InsufficientResources"}]}
    device = boot(faults=plan)
    pynvml.nvmlDeviceCreateGpuInstance(device, 19)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        pynvml.nvmlDeviceCreateGpuInstance(device, 19)
    assert gi_count(state_path) == 1
    pynvml.nvmlDeviceCreateGpuInstance(device, 19)
    assert gi_count(state_path) == 2


def test_count_consecutive_calls_fail_and_other_symbols_are_untouched(boot: Boot) -> None:
    plan = sim.FaultPlan(
        rules=(sim.FaultRule(symbol="nvmlDeviceGetMigMode", nth=1, count=2, error=pynvml.NVML_ERROR_UNKNOWN),)
    )
    device = boot(faults=plan)
    pynvml.nvmlDeviceGetMaxMigDeviceCount(device)
    for _ in range(2):
        with pytest.raises(pynvml.NVMLError_Unknown):
            pynvml.nvmlDeviceGetMigMode(device)
    assert pynvml.nvmlDeviceGetMigMode(device) == [1, 1]


@pytest.mark.parametrize(
    "spelling",
    ["NVML_ERROR_IN_USE", "InUse", "NVMLError_InUse", 19, "19"],
    ids=["constant", "class", "full", "int", "str"],
)
def test_error_spellings(spelling: int | str) -> None:
    rule = sim.FaultRule.model_validate({"symbol": "nvmlGpuInstanceDestroy", "error": spelling})
    assert rule.error == pynvml.NVML_ERROR_IN_USE
    assert sim.FaultPlan.model_validate_json(sim.FaultPlan(rules=(rule,)).model_dump_json()).rules == (rule,)


@pytest.mark.parametrize(
    "rule",
    [
        {"symbol": "nvmlShutdown", "error": "NoSuchError"},
        {"symbol": "nvmlShutdown", "error": 0},
        {"symbol": "nvmlShutdown"},
        {"symbol": "nvmlShutdown", "error": 1, "nth": 0},
        {"symbol": "nvmlShutdown", "error": 1, "action": "explode"},
        {"symbol": "nvmlShutdown", "error": True},
    ],
    ids=["unknown-name", "success", "fail-without-error", "zeroth-call", "unknown-action", "boolean-error"],
)
def test_invalid_rules_are_refused(rule: dict[str, Any]) -> None:
    with pytest.raises(pydantic.ValidationError):
        sim.FaultRule.model_validate(rule)


def test_plan_from_the_environment(boot: Boot, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = sim.FaultPlan(rules=(sim.FaultRule(symbol="nvmlDeviceGetCount_v2", error="NVML_ERROR_NOT_FOUND"),))
    monkeypatch.setenv(sim.FAULTS_ENV, plan.model_dump_json())
    boot(faults=build_nvml_settings(sim_gpus="H100-SXM5-80GB").sim_faults)  # as open_nvml passes it
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetCount()
    assert pynvml.nvmlDeviceGetCount() == 1


def test_latency_delays_only_its_symbol(boot: Boot) -> None:
    device = boot(latency={"nvmlDeviceGetMigMode": 0.2})
    library: sim.SimulatedNvmlLibrary = pynvml.nvmlLib
    slept: list[float] = []
    library.sleep = slept.append
    pynvml.nvmlDeviceGetMigMode(device)
    assert slept == [0.2]
    pynvml.nvmlDeviceGetMaxMigDeviceCount(device)
    assert slept == [0.2]


def test_latency_is_slept_outside_the_state_lock(boot: Boot) -> None:
    """Two GPUs creating at once sleep their latency at the same time: the sleep holds no lock.

    Each sleep waits at a barrier for the other; were the latency slept under the state lock, the
    second call could not reach its sleep and the barrier would break.
    """
    boot(gpus=["H100-SXM5-80GB", "H100-SXM5-80GB"], latency={"nvmlDeviceCreateGpuInstance": 0.4})
    library: sim.SimulatedNvmlLibrary = pynvml.nvmlLib
    both_sleeping = threading.Barrier(2, timeout=30)

    def sleep_beside_the_other(seconds: float) -> None:
        both_sleeping.wait()

    library.sleep = sleep_beside_the_other
    devices = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
    errors: list[BaseException] = []

    def create(device: Any) -> None:
        try:
            pynvml.nvmlDeviceCreateGpuInstance(device, 19)
        except BaseException as e:  # re-raised in the test thread below
            errors.append(e)

    threads = [threading.Thread(target=create, args=(d,)) for d in devices]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert [gi_count_of(d) for d in devices] == [1, 1]


def gi_count_of(device: Any) -> int:
    return int(7 - pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, 19))


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        (
            {"rules": [{"symbol": "nvmlDeviceCreateGpuInstanse", "error": "InUse"}]},
            r"fault plan: rules\.0\.symbol: 'nvmlDeviceCreateGpuInstanse' is not an NVML symbol the simulator "
            r"implements; did you mean nvmlDeviceCreateGpuInstance\?",
        ),
        (
            {"latency": {"nvmlDeviceGetCount": 0.1}},
            r"latency: 'nvmlDeviceGetCount' .* did you mean nvmlDeviceGetCount_v2\?",
        ),
        ({"rules": [{"symbol": "cudaMalloc", "error": 1}]}, "the simulator's symbols are the nvml"),
        ({"rulez": []}, r"rulez: unknown key \(a plan has rules, latency; a rule has symbol, nth, count"),
    ],
    ids=["misspelt", "unversioned", "not-nvml", "unknown-key"],
)
def test_a_plan_that_would_never_fire_is_refused(plan: dict[str, Any], message: str, state_path: Path) -> None:
    """A rule for a symbol the simulator does not implement would silently never fire."""
    with pytest.raises(sim.FaultPlanError, match=message):
        sim.install(state_path, gpus=["H100-SXM5-80GB"], faults=plan)
    assert not state_path.exists()  # refused before the machine was touched


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kill nvmlInit", r"MIGDRA_SIM_FAULTS is not JSON \(line 1, column 1: Expecting value\)"),
        ('{"rules": {"symbol": "nvmlInit_v2"}}', "MIGDRA_SIM_FAULTS: rules: expected a JSON array"),
        ('{"latency": {"*": -1}}', r"MIGDRA_SIM_FAULTS: latency: negative latency for \['\*'\]"),
        ('{"latency": {"*": 1e9}}', r"MIGDRA_SIM_FAULTS: latency: more than 60 s per call for \['\*'\]"),
    ],
    ids=["not-json", "wrong-shape", "negative-latency", "endless-latency"],
)
def test_a_bad_plan_in_the_environment_names_the_variable(
    text: str, message: str, state_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(sim.FAULTS_ENV, text)
    settings = build_nvml_settings(sim_state=state_path, sim_gpus="H100-SXM5-80GB")
    with pytest.raises(sim.FaultPlanError, match=message), open_nvml(settings):
        pass
    assert not state_path.exists()
