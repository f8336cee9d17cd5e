"""The simulator's mutations: all or nothing, private to the transaction, and only the GPU they change.

Every mutating NVML call is one :meth:`StateStore.transaction`.  It must leave the state file (and the
state other readers hold) exactly as it was when the call fails, never change a state a reader was
handed, copy only the GPU it changes -- the untouched GPUs of the new state are the very objects of
the old one, so a call's work does not grow with the machine -- and still write the whole file in the
one format every reader parses.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from dra_driver.mig import Placement
from dra_driver.nvml import sim
from dra_driver.nvml.sim.library import SimulatedNvmlLibrary
from dra_driver.nvml.sim.state import SimGpuInstance, StateStore, parse_state

H100 = "H100-SXM5-80GB"
ONE_G = 19  # H100 1g.10gb
FIRST_SLICE = Placement(start=0, size=1)


@pytest.fixture
def machine(tmp_path: Path) -> Iterator[tuple[Path, SimulatedNvmlLibrary]]:
    """Three simulated H100s with MIG on, the library installed and NVML initialised."""
    state_path = tmp_path / "state.json"
    library = sim.install(state_path, gpus=[H100] * 3, mig_enabled=True, faults={})
    pynvml.nvmlInit()
    try:
        yield state_path, library
    finally:
        pynvml.nvmlShutdown()
        sim.uninstall()


def file_as_is(path: Path) -> tuple[bytes, int, int]:
    """The file's bytes, inode and mtime: a write (even of the same bytes) changes the last two."""
    st = os.stat(path)
    return path.read_bytes(), st.st_ino, st.st_mtime_ns


def change_then_fail(store: StateStore) -> None:
    """A transaction that changes a GPU and the state's own counter, then fails."""
    with store.transaction() as change:
        gpu = change.gpu(2)
        gpu.busy = True
        gpu.gpu_instances.append(SimGpuInstance(gpu_instance_id=7, profile_id=ONE_G, placement=FIRST_SLICE))
        change.state.instance_serial += 5
        raise RuntimeError("midway")


def add_misnumbered_gpu_instance(store: StateStore) -> None:
    """A transaction whose change no hardware could make: a 1g at start 0 has GI ID 7 on an H100, not 3."""
    with store.transaction() as change:
        change.gpu(0).gpu_instances.append(SimGpuInstance(gpu_instance_id=3, profile_id=ONE_G, placement=FIRST_SLICE))


def test_a_refused_call_leaves_the_state_file_unchanged(machine: tuple[Path, SimulatedNvmlLibrary]) -> None:
    state_path, library = machine
    device = pynvml.nvmlDeviceGetHandleByIndex(1)
    at_start_3 = ctypes.byref(pynvml.c_nvmlGpuInstancePlacement_t(3, 1))
    gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(device, ONE_G, at_start_3)
    pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    before, held = file_as_is(state_path), library.store.read()
    with pytest.raises(pynvml.NVMLError_InsufficientResources):  # the placement is taken
        pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(device, ONE_G, at_start_3)
    with pytest.raises(pynvml.NVMLError_InUse):  # a GI with a CI cannot go
        pynvml.nvmlGpuInstanceDestroy(gi)
    assert file_as_is(state_path) == before
    assert library.store.read() is held


def test_a_transaction_that_fails_after_changing_leaves_everything_as_it_was(
    machine: tuple[Path, SimulatedNvmlLibrary],
) -> None:
    """Changes made before the failure (a GPU's fields, a new GI, the state's own counter) are dropped,
    in the file and in the state readers hold."""
    state_path, library = machine
    before, held = file_as_is(state_path), library.store.read()
    snapshot = held.model_copy(deep=True)
    with pytest.raises(RuntimeError, match="midway"):
        change_then_fail(library.store)
    assert file_as_is(state_path) == before
    assert library.store.read() is held
    assert held == snapshot


def test_a_change_copies_only_the_gpu_it_changes(machine: tuple[Path, SimulatedNvmlLibrary]) -> None:
    """After a GI and a CI are created on GPU 1, GPUs 0 and 2 of the new state are the old state's own
    objects (nothing copied them), GPU 1 is a new one, and the old state is as it was."""
    state_path, library = machine
    old = library.store.read()
    snapshot = old.model_copy(deep=True)
    gi = pynvml.nvmlDeviceCreateGpuInstance(pynvml.nvmlDeviceGetHandleByIndex(1), ONE_G)
    pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    new = library.store.read()
    assert new is not old
    assert new.gpus[0] is old.gpus[0]
    assert new.gpus[2] is old.gpus[2]
    assert new.gpus[1] is not old.gpus[1]
    assert old == snapshot  # a reader's state never changes under it
    assert len(new.gpus[1].gpu_instances[0].compute_instances) == 1
    assert new.instance_serial == old.instance_serial + 1
    assert parse_state(state_path.read_bytes(), state_path) == new  # the file says what the store holds


def test_an_unchanging_call_writes_nothing(machine: tuple[Path, SimulatedNvmlLibrary]) -> None:
    state_path, _ = machine
    before = file_as_is(state_path)
    pynvml.nvmlDeviceSetMigMode(pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.NVML_DEVICE_MIG_ENABLE)  # already on
    assert file_as_is(state_path) == before


def test_the_file_is_the_whole_state_in_its_one_format(machine: tuple[Path, SimulatedNvmlLibrary]) -> None:
    """Writes reuse the text of GPUs they did not change: byte for byte what serialising the whole
    state writes, also after another writer (the operator API's own store) changed a GPU in between."""
    state_path, library = machine
    devices = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3)]
    for step, (index, profile_id) in enumerate([(0, ONE_G), (2, 14), (0, 9), (1, 0)]):
        gi = pynvml.nvmlDeviceCreateGpuInstance(devices[index], profile_id)
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
        if step == 1:
            sim.set_busy(state_path, library.store.read().gpus[1].uuid, True)  # not through the library
        state = library.store.read()
        assert state_path.read_bytes() == state.model_dump_json(indent=1).encode()
    assert state.gpus[1].busy  # the other writer's change survived the library's later writes
    assert [len(gpu.gpu_instances) for gpu in state.gpus] == [2, 1, 1]


def test_a_change_no_hardware_could_make_is_refused_and_not_written(
    machine: tuple[Path, SimulatedNvmlLibrary],
) -> None:
    """The changed GPU is held to the loader's invariants before the write: a rule's bug must not write
    a file every other process would refuse."""
    state_path, library = machine
    before = file_as_is(state_path)
    with pytest.raises(sim.SimulatorError, match=r"no hardware can be in .*GPU 0 GPU instance 3"):
        add_misnumbered_gpu_instance(library.store)
    assert file_as_is(state_path) == before
    assert StateStore(state_path).read() == library.store.read()
