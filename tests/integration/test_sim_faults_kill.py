"""The simulator's kill faults in a process of their own: ``kill_after`` dies once the call's change is
persisted, ``kill_before`` dies before it.  The simulator's other faults are tests/unit/test_sim_faults.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from dra_driver.nvml import sim
from tests.conftest import Boot
from tests.unit.test_sim_faults import gi_count

CREATE_ONE_GI = textwrap.dedent(
    """
    import sys, pynvml
    from dra_driver.nvml import sim
    from dra_driver.nvml.settings import build_nvml_settings
    sim.install(sys.argv[1], faults=build_nvml_settings(sim_state=sys.argv[1]).sim_faults)
    pynvml.nvmlInit()
    pynvml.nvmlDeviceCreateGpuInstance(pynvml.nvmlDeviceGetHandleByIndex(0), 19)
    print("survived", flush=True)
    """
)


def run_with_plan(state_path: Path, plan: sim.FaultPlan) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, sim.FAULTS_ENV: plan.model_dump_json()}
    return subprocess.run(
        [sys.executable, "-c", CREATE_ONE_GI, str(state_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_kill_after_persists_then_dies(boot: Boot, state_path: Path) -> None:
    boot()  # creates the state file the subprocess loads
    rule = sim.FaultRule(symbol="nvmlDeviceCreateGpuInstance", action="kill_after")
    result = run_with_plan(state_path, sim.FaultPlan(rules=(rule,)))
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert "survived" not in result.stdout
    [gi] = sim.snapshot(state_path).gpus[0].gpu_instances
    assert (gi.profile_id, gi.placement.start) == (19, 6)


def test_kill_before_dies_without_persisting(boot: Boot, state_path: Path) -> None:
    boot()
    rule = sim.FaultRule(symbol="nvmlDeviceCreateGpuInstance", action="kill_before")
    result = run_with_plan(state_path, sim.FaultPlan(rules=(rule,)))
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert "survived" not in result.stdout
    assert gi_count(state_path) == 0
