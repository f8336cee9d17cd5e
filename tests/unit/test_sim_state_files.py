"""The simulator's state file as a user hands it over: refused in one line, never rewritten, no lock left.

A state file is a text file people edit and mistype; the store must refuse what no real machine can
be in (naming the file and the problem), wait for its lock only so long, read without being able to
write, and leave a refused file and its directory exactly as they were.  The command-line side of
the same mistakes is in ``tests/integration/badinput/cases/simulator.yaml``.
"""

from __future__ import annotations

import copy
import fcntl
import json
import os
from pathlib import Path
from typing import Any

import pynvml
import pytest

from dra_driver.nvml import sim
from dra_driver.nvml.sim.invariants import state_problems
from dra_driver.nvml.sim.state import SimState, StateStore

GPU_UUID = "GPU-40c1900a-1b1c-51be-a0eb-2d99e1f097db"


def machine(*gpu_instances: dict[str, Any], mig: bool = True, model: str = "H100-SXM5-80GB") -> dict[str, Any]:
    """One simulated H100 (by default) holding ``gpu_instances``, as the state file spells it."""
    return {
        "schema_version": 1,
        "driver_version": "580.65.06",
        "cuda_driver_version": 13000,
        "uuid_namespace": "14bc100a-1ba0-53ec-9194-6a54f7f43b8d",
        "gpus": [
            {
                "index": 0,
                "model": model,
                "uuid": GPU_UUID,
                "pci_domain": 0,
                "pci_bus": 0x1B,
                "numa_node": 0,
                "mig_mode_current": mig,
                "mig_mode_pending": mig,
                "gpu_instances": list(gpu_instances),
            }
        ],
    }


def gi(gpu_instance_id: int, profile_id: int, start: int, size: int, *cis: dict[str, Any]) -> dict[str, Any]:
    return {
        "gpu_instance_id": gpu_instance_id,
        "profile_id": profile_id,
        "placement": {"start": start, "size": size},
        "compute_instances": list(cis),
    }


def ci(compute_instance_id: int, ci_profile_id: int, start: int, size: int, serial: int = 1) -> dict[str, Any]:
    return {
        "compute_instance_id": compute_instance_id,
        "ci_profile_id": ci_profile_id,
        "placement": {"start": start, "size": size},
        "uuid": f"MIG-0f3b1c59-6a52-5b44-8f6a-3bd3c1f3a{serial:03d}",
    }


# H100-SXM5-80GB profile IDs: 19 = 1g.10gb, 20 = 1g.10gb+me, 15 = 1g.20gb, 14 = 2g.20gb, 9 = 3g.40gb,
# 0 = 7g.80gb.  GI IDs follow the catalog rule (1g at start s: 7 + s; 2g: 3 + s/2; 3g: 1 + s/4).
IMPOSSIBLE = {
    "compute-instances-overlap": (
        machine(gi(1, 9, 0, 4, ci(0, 1, 0, 2, 1), ci(1, 0, 1, 1, 2))),
        "GPU 0 GPU instance 1: compute instances 0 (at 0:2) and 1 (at 1:1) overlap",
    ),
    "compute-instance-id-twice": (
        machine(gi(1, 9, 0, 4, ci(0, 0, 0, 1, 1), ci(0, 0, 1, 1, 2))),
        "GPU 0 GPU instance 1: compute instance ID 0 is used twice",
    ),
    "unknown-compute-profile": (
        machine(gi(7, 19, 0, 1, ci(0, 5, 0, 1))),
        "GPU 0 GPU instance 7 compute instance 0: GI profile 1g.10gb has no compute-instance profile 5",
    ),
    "compute-instance-on-an-illegal-placement": (
        machine(gi(1, 9, 0, 4, ci(0, 1, 0, 2, 1), ci(1, 1, 2, 2, 2))),
        "GPU 0 GPU instance 1 compute instance 1: 2:2 is not a placement of MIG 2c.3g.40gb (legal: 0:2)",
    ),
    "profile-instance-count": (
        machine(gi(7, 20, 0, 1), gi(8, 20, 1, 1)),
        "GPU 0: 2 GPU instances of 1g.10gb+me, but the profile allows 1",
    ),
    "engine-budget": (
        # A30 (profile 21 = 1g.6gb+me, 6 = 2g.12gb+me): each takes the GPU's one OFA and JPEG engine.
        machine(gi(4, 21, 0, 1), gi(2, 6, 2, 2), model="A30"),
        "GPU 0: its GPU instances together hold 2 jpeg, but A30 has 1",
    ),
    "overlapping-sizes": (
        machine(*(gi(7 + start, 19, start, 1) for start in range(7)), gi(6, 15, 6, 2)),
        "GPU 0: GPU instances 13 (1g.10gb at 6:1) and 6 (1g.20gb at 6:2) overlap",
    ),
    "gpu-instance-id-off-the-rule": (
        machine(gi(8, 19, 0, 1)),
        "GPU 0 GPU instance 8: a 1g.10gb at 0:1 has GPU instance ID 7 on H100-SXM5-80GB",
    ),
    "mig-device-uuid-is-a-gpu-uuid": (
        machine(gi(7, 19, 0, 1, {**ci(0, 0, 0, 1), "uuid": GPU_UUID})),
        f"UUID {GPU_UUID} is used twice (GPU 0 and GPU 0 GPU instance 7 compute instance 0)",
    ),
    "alias-as-model": (
        machine(model="H100"),
        "GPU 0: GPU model 'H100' is an alias; state files name catalog keys: write 'H100-SXM5-80GB'",
    ),
}


@pytest.mark.parametrize(("raw", "problem"), IMPOSSIBLE.values(), ids=IMPOSSIBLE.keys())
def test_impossible_states_are_named(raw: dict[str, Any], problem: str) -> None:
    problems = state_problems(SimState.model_validate(raw))
    assert any(problem in p for p in problems), problems


def test_every_state_the_simulator_writes_is_possible(tmp_path: Path) -> None:
    """The loader's checks and the simulator's rules agree: a full, busy machine loads again."""
    state_path = tmp_path / "state.json"
    sim.install(state_path, gpus=["H100-SXM5-80GB", "A30"], mig_enabled=True)
    try:
        pynvml.nvmlInit()
        for index, profiles in ((0, (9, 14, 19, 19)), (1, (5, 14, 14))):
            device = pynvml.nvmlDeviceGetHandleByIndex(index)
            for profile_id in profiles:
                instance = pynvml.nvmlDeviceCreateGpuInstance(device, profile_id)
                pynvml.nvmlGpuInstanceCreateComputeInstance(instance, 0)
        pynvml.nvmlShutdown()
    finally:
        sim.uninstall()
    assert state_problems(sim.snapshot(state_path)) == []


def contents(directory: Path) -> dict[str, bytes | None]:
    """What a directory holds; a refused file must leave it as it was (no lock, no temporary file)."""
    return {p.name: p.read_bytes() if p.is_file() else None for p in sorted(directory.iterdir())}


REFUSED_FILES = {
    "not-json": b"gpus: [H100]\n",
    "binary": bytes(range(256)),
    "another-programs-json": b'{"name": "my-app"}',
    "impossible": json.dumps(machine(gi(7, 19, 0, 1), gi(8, 19, 0, 1))).encode(),
    "newer-schema": b'{"schema_version": 9}',
}


@pytest.mark.parametrize("data", REFUSED_FILES.values(), ids=REFUSED_FILES.keys())
def test_a_refused_state_file_is_left_as_it_was(tmp_path: Path, data: bytes) -> None:
    state_path = tmp_path / "state.json"
    state_path.write_bytes(data)
    before = contents(tmp_path)
    with pytest.raises(sim.StateFileError, match=str(state_path)):
        sim.install(state_path, gpus=["H100-SXM5-80GB"])
    assert contents(tmp_path) == before  # not rewritten, not deleted, no lock file beside it


def test_failed_attempts_leave_no_lock_file_or_directory(tmp_path: Path) -> None:
    (tmp_path / "machine").mkdir()
    with pytest.raises(sim.StateFileError, match="is a directory"):
        sim.install(tmp_path / "machine", gpus=["H100"])
    with pytest.raises(sim.StateFileMissingError):
        sim.install(tmp_path / "missing" / "state.json")
    with pytest.raises(sim.FaultPlanError):
        sim.install(tmp_path / "state.json", gpus=["H100"], faults={"rules": [{"symbol": "nvmlBogus", "error": 1}]})
    assert contents(tmp_path) == {"machine": None}
    assert list((tmp_path / "machine").iterdir()) == []


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "state.json"
    os.mkfifo(fifo)
    with pytest.raises(sim.StateFileError, match="is not a regular file"):
        sim.install(fifo)


def test_reading_needs_no_lock_and_changing_says_why_it_cannot(tmp_path: Path) -> None:
    """A state file whose lock cannot be created (read-only directory; here the lock's name is taken by
    a directory, which root cannot get around either) can be read, and changing it fails in one line."""
    state_path = tmp_path / "state.json"
    state_path.write_text(json.dumps(machine()))
    (tmp_path / "state.json.lock").mkdir()
    sim.install(state_path, gpus=["H100-SXM5-80GB"])
    try:
        pynvml.nvmlInit()
        device = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert pynvml.nvmlDeviceGetUUID(device) == GPU_UUID
        with pytest.raises(sim.StateFileError, match=r"cannot create .*state\.json\.lock, the lock file of"):
            pynvml.nvmlDeviceCreateGpuInstance(device, 19)
        pynvml.nvmlShutdown()
    finally:
        sim.uninstall()
    assert json.loads(state_path.read_text()) == machine()


def test_waiting_for_the_lock_is_bounded(tmp_path: Path) -> None:
    state_path = tmp_path / "state.json"
    state_path.write_text(json.dumps(machine()))
    store = StateStore(state_path, lock_timeout=0.2)
    holder = os.open(store.lock_path, os.O_RDWR | os.O_CREAT)  # another process's lock, as flock sees it
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with (
            pytest.raises(sim.StateLockTimeout, match=r"has held .*state\.json\.lock.* for more than 0\.2 s"),
            store.transaction(),
        ):
            pass
    finally:
        os.close(holder)
    with store.transaction() as change:  # released: the next transaction goes through
        change.gpu(0).busy = True
    assert sim.snapshot(state_path).gpus[0].busy


def test_a_state_file_is_read_without_being_changed(tmp_path: Path) -> None:
    """Loading an existing file for reading creates nothing beside it (not even the lock file)."""
    state_path = tmp_path / "state.json"
    raw = machine(gi(7, 19, 0, 1))
    state_path.write_text(json.dumps(raw))
    before = contents(tmp_path)
    sim.install(state_path)
    try:
        pynvml.nvmlInit()
        assert pynvml.nvmlDeviceGetCount() == 1
        pynvml.nvmlShutdown()
    finally:
        sim.uninstall()
    assert contents(tmp_path) == before
    assert json.loads(state_path.read_text()) == copy.deepcopy(raw)


def test_a_dangling_symbolic_link_is_refused_not_written_through(tmp_path: Path) -> None:
    link = tmp_path / "state.json"
    link.symlink_to(tmp_path / "elsewhere" / "state.json")
    with pytest.raises(sim.StateFileError, match=r"is a symbolic link .* that leads to no file"):
        sim.install(link, gpus=["H100-SXM5-80GB"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # no lock, no 'elsewhere'
