"""The simulated machine lives in its state file: across processes, restarts, SIGKILL and contention.

Each test drives real subprocesses (``sys.executable``) through the real pynvml wrappers and checks
the state file with :func:`dra_driver.nvml.sim.snapshot`.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from dra_driver.mig.catalog import load_catalog
from dra_driver.nvml import sim
from dra_driver.nvml.sim.state import SimState, StateStore

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def state_path(tmp_path: Path) -> Path:
    return tmp_path / "machine" / "state.json"


@pytest.fixture(autouse=True)
def machine(state_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A fresh two-GPU H100 machine with MIG on; this process has the simulator installed."""
    monkeypatch.delenv(sim.FAULTS_ENV, raising=False)
    sim.install(state_path, gpus=["H100-SXM5-80GB", "H100-SXM5-80GB"], mig_enabled=True)
    pynvml.nvmlInit()
    yield
    sim.uninstall()


def python(code: str, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != sim.FAULTS_ENV}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def finish(process: subprocess.Popen[str]) -> str:
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    return stdout


# How long a child may take to reach a handshake.  Generous because its first NVML call loads the
# catalog, which takes seconds on a loaded machine; a child that is merely slow passes, one that hangs
# or dies fails with its stderr.
HANDSHAKE_SECONDS = 60.0


def read_handshake(process: subprocess.Popen[str], expected: str) -> None:
    """Wait, bounded, for the child's next stdout line and check it is ``expected``.

    Reads the pipe a byte at a time, beneath the text wrapper, so nothing after the line is consumed
    and a later :func:`finish` still sees the rest of the output.
    """
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + HANDSHAKE_SECONDS
    line = b""
    while not line.endswith(b"\n"):
        readable, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if not readable:
            process.kill()
            _, stderr = process.communicate()
            pytest.fail(f"the child did not say {expected!r} within {HANDSHAKE_SECONDS} s; stderr:\n{stderr}")
        byte = os.read(fd, 1)
        if not byte:
            _, stderr = process.communicate()
            pytest.fail(f"the child exited ({process.returncode}) before saying {expected!r}; stderr:\n{stderr}")
        line += byte
    assert line.decode().strip() == expected


def assert_consistent(state: SimState) -> None:
    """What a real GPU guarantees: GIs on legal, disjoint placements with their catalog IDs; CIs
    disjoint inside their GI; MIG UUIDs unique."""
    catalog = load_catalog()
    uuids = []
    for gpu in state.gpus:
        model = catalog.gpus[gpu.model]
        ids = [gi.gpu_instance_id for gi in gpu.gpu_instances]
        assert len(ids) == len(set(ids))
        for a, b in itertools.combinations(gpu.gpu_instances, 2):
            assert not a.placement.overlaps(b.placement), (a, b)
        for gi in gpu.gpu_instances:
            profile = model.profile_by_id(gi.profile_id)
            assert gi.placement in profile.placements
            assert gi.gpu_instance_id == model.gpu_instance_id(gi.placement)
            for a, b in itertools.combinations(gi.compute_instances, 2):
                assert not a.placement.overlaps(b.placement), (a, b)
            for ci in gi.compute_instances:
                assert ci.placement in profile.compute_instance_profile(ci.ci_profile_id).placements
                uuids.append(ci.uuid)
    assert len(uuids) == len(set(uuids))


LIST_MIG_DEVICES = """
    import json, sys, pynvml
    from dra_driver.nvml import sim
    sim.install(sys.argv[1])
    pynvml.nvmlInit()
    found = []
    for index in range(pynvml.nvmlDeviceGetCount()):
        device = pynvml.nvmlDeviceGetHandleByIndex(index)
        for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(device)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, slot)
            except pynvml.NVMLError_NotFound:
                continue
            found.append([index, pynvml.nvmlDeviceGetGpuInstanceId(mig), pynvml.nvmlDeviceGetUUID(mig)])
    print(json.dumps(found))
"""


def test_instances_created_here_are_seen_by_another_process(state_path: Path) -> None:
    device = pynvml.nvmlDeviceGetHandleByIndex(1)
    gi = pynvml.nvmlDeviceCreateGpuInstance(device, 14)
    mig = pynvml.nvmlComputeInstanceGetInfo(pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 1)).device
    seen = json.loads(finish(python(LIST_MIG_DEVICES, str(state_path))))
    assert seen == [[1, pynvml.nvmlGpuInstanceGetInfo(gi).id, pynvml.nvmlDeviceGetUUID(mig)]]


def test_instances_created_by_another_process_are_seen_here(state_path: Path) -> None:
    device = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, 9) == 2  # warms this process's cache
    code = """
        import sys, pynvml
        from dra_driver.nvml import sim
        sim.install(sys.argv[1])
        pynvml.nvmlInit()
        gi = pynvml.nvmlDeviceCreateGpuInstance(pynvml.nvmlDeviceGetHandleByIndex(0), 9)
        ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 2)
        print(pynvml.nvmlDeviceGetUUID(pynvml.nvmlComputeInstanceGetInfo(ci).device))
    """
    mig_uuid = finish(python(code, str(state_path))).strip()
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(device, 9) == 1
    mig = pynvml.nvmlDeviceGetHandleByUUID(mig_uuid)
    assert pynvml.nvmlDeviceGetGpuInstanceId(mig) == 2  # the 3g went to start 4
    # The MIG UUID is part of the machine, not of the process that created it.
    sim.uninstall()
    sim.install(state_path)
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(device, 0)) == mig_uuid


def test_reads_reparse_only_after_a_write(state_path: Path) -> None:
    store = StateStore(state_path)
    first = store.read()
    assert store.read() is first  # unchanged file: the cached model, no parse
    sim.set_busy(state_path, first.gpus[0].uuid, True)  # another writer (own store, own cache)
    second = store.read()
    assert second is not first
    assert second.gpus[0].busy
    assert store.read() is second


CHURN = """
    import itertools, random, sys, pynvml
    from dra_driver.nvml import sim
    sim.install(sys.argv[1])
    pynvml.nvmlInit()
    rng = random.Random(int(sys.argv[2]))
    announce_after = int(sys.argv[3])
    devices = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    profiles = [19, 20, 15, 14, 9, 5, 0]
    for done in itertools.count():
        if done == announce_after:
            print("churning", flush=True)  # the parent kills us from here on, mid-operation
        device = rng.choice(devices)
        try:
            if rng.random() < 0.6:
                gi = pynvml.nvmlDeviceCreateGpuInstance(device, rng.choice(profiles))
                pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
            else:
                for profile in profiles:
                    array = (pynvml.c_nvmlGpuInstance_t * 7)()
                    count = pynvml.c_uint()
                    pynvml.nvmlDeviceGetGpuInstances(device, profile, array, pynvml.byref(count))
                    for gi in array[: count.value]:
                        cis = (pynvml.c_nvmlComputeInstance_t * 7)()
                        ci_count = pynvml.c_uint()
                        for ci_profile in (0, 7):
                            try:
                                pynvml.nvmlGpuInstanceGetComputeInstances(gi, ci_profile, cis, pynvml.byref(ci_count))
                            except pynvml.NVMLError_NotSupported:
                                continue
                            for ci in cis[: ci_count.value]:
                                pynvml.nvmlComputeInstanceDestroy(ci)
                        pynvml.nvmlGpuInstanceDestroy(gi)
                        break
        except pynvml.NVMLError_InsufficientResources:
            pass
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_mid_churn_leaves_a_consistent_machine(state_path: Path, seed: int) -> None:
    # The child says when it has finished this many operations; the kill then lands in a later one,
    # at a point that differs with the seed, however slowly the machine runs.
    process = python(CHURN, str(state_path), str(seed), str(20 * seed))
    read_handshake(process, "churning")
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    state = sim.snapshot(state_path)
    assert state.instance_serial > 0  # it did work before it died
    assert_consistent(state)
    # The machine is still usable afterwards, by a new process as well as by this one.
    json.loads(finish(python(LIST_MIG_DEVICES, str(state_path))))
    assert pynvml.nvmlDeviceGetCount() == 2


FILL_GPU = """
    import json, sys, pynvml
    from dra_driver.nvml import sim
    sim.install(sys.argv[1])
    pynvml.nvmlInit()
    device = pynvml.nvmlDeviceGetHandleByIndex(0)
    print("ready", flush=True)
    sys.stdin.readline()  # the parent's go, sent once every creator is ready: they start together
    mine = []
    while True:
        try:
            gi = pynvml.nvmlDeviceCreateGpuInstance(device, 19)
        except pynvml.NVMLError_InsufficientResources:
            break
        info = pynvml.nvmlGpuInstanceGetInfo(gi)
        mine.append([info.id, info.placement.start])
    print(json.dumps(mine))
"""


def test_concurrent_creators_never_double_book(state_path: Path) -> None:
    processes = [python(FILL_GPU, str(state_path), stdin=subprocess.PIPE) for _ in range(3)]
    for process in processes:
        read_handshake(process, "ready")
    for process in processes:
        assert process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
    results = [json.loads(finish(p)) for p in processes]
    won = [tuple(gi) for result in results for gi in result]
    assert len(won) == 7  # every 1g slot created exactly once
    assert sorted(start for _, start in won) == list(range(7))
    state = sim.snapshot(state_path)
    assert sorted((gi.gpu_instance_id, gi.placement.start) for gi in state.gpus[0].gpu_instances) == sorted(won)
    assert_consistent(state)


def test_writes_leave_no_temporary_files(state_path: Path) -> None:
    device = pynvml.nvmlDeviceGetHandleByIndex(0)
    for _ in range(3):
        pynvml.nvmlGpuInstanceDestroy(pynvml.nvmlDeviceCreateGpuInstance(device, 0))
    assert sorted(p.name for p in state_path.parent.iterdir()) == ["state.json", "state.json.lock"]


def test_install_loads_an_existing_file_and_checks_its_models(state_path: Path) -> None:
    gpu_uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0))
    with pytest.raises(ValueError, match="holds GPUs"):
        sim.install(state_path, gpus=["A30"])
    sim.install(state_path, gpus=["H100", "H100-80GB"], mig_enabled=False)  # aliases; mig_enabled ignored
    try:
        pynvml.nvmlInit()
        assert pynvml.nvmlDeviceGetMigMode(pynvml.nvmlDeviceGetHandleByIndex(0)) == [1, 1]
    finally:
        sim.uninstall()
    with pytest.raises(ValueError, match="does not exist"):
        sim.install(state_path.with_name("other.json"))
    # GPU UUIDs derive from the state file's path: a machine re-created there has the same GPUs.
    state_path.unlink()
    sim.install(state_path, gpus=["H100-SXM5-80GB", "H100-SXM5-80GB"])
    try:
        pynvml.nvmlInit()
        assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0)) == gpu_uuid
    finally:
        sim.uninstall()


def test_a_state_file_of_another_schema_is_refused(state_path: Path) -> None:
    raw = json.loads(state_path.read_text())
    raw["schema_version"] = 99
    other = state_path.with_name("old.json")
    other.write_text(json.dumps(raw))
    with pytest.raises(sim.StateFileError, match="schema version 99"):
        sim.install(other)
