"""What a prepare reads from NVML: only the GPU its devices name, and that GPU's MIG mode every time; an
unprepare of a claim the node never prepared makes no NVML call at all.

Reading every GPU's profiles for every prepare cost ~440 NVML calls for one device on an 8-GPU node;
the GPUs are now listed once per session (kubeletplugin.prepare.devices.NodeGpus).  These tests count
the simulator's C calls, so they fail if a prepare goes back to reading other GPUs, and they prove
that keeping the list does not hide a MIG-mode change made behind migdra's back.
"""

from __future__ import annotations

from pathlib import Path

from dra_driver.kubelet.calls import ClaimRef, UnprepareResult
from dra_driver.nvml.backend import Nvml
from tests.kube_apiserver import KubeApiServer
from tests.prepare_harness import result, simulated_node

# NVML calls that read a GPU's identity (list_gpus) or its GI profiles and placements.
IDENTITY_CALLS = ("nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetMinorNumber", "nvmlDeviceGetName")
PROFILE_CALLS = ("nvmlDeviceGetGpuInstanceProfileInfoV", "nvmlDeviceGetGpuInstancePossiblePlacements_v2")


def _device(gpu: int, start: int) -> str:
    return f"gpu-{gpu}-mig-1g10gb-19-{start}"


def _calls(library: object, names: tuple[str, ...]) -> int:
    faults = library.faults  # type: ignore[attr-defined]
    return sum(faults.calls(name) for name in names)


def test_a_prepare_reads_only_the_gpu_its_device_names(api_server: KubeApiServer, tmp_path: Path) -> None:
    with simulated_node(tmp_path, ["H100-SXM5-80GB"] * 4, api=api_server) as node:
        service = node.service()
        first = node.claim("first", [result(_device(0, 0))])
        assert not service.prepare([first])[first.uid].error
        # One GPU's profile tables, read in full: the most a later prepare on one GPU may read.
        identity_before = _calls(node.library, IDENTITY_CALLS)
        profiles_before = _calls(node.library, PROFILE_CALLS)

        second = node.claim("second", [result(_device(3, 1))])
        assert not service.prepare([second])[second.uid].error

        assert _calls(node.library, IDENTITY_CALLS) == identity_before, "the GPUs were listed again"
        one_gpu = _one_gpu_profile_reads(tmp_path / "reference", api_server)
        assert _calls(node.library, PROFILE_CALLS) - profiles_before <= one_gpu


def _one_gpu_profile_reads(root: Path, api: KubeApiServer) -> int:
    """How many profile calls reading one H100's profiles and placements takes (on a node of its own)."""
    with simulated_node(root, ["H100-SXM5-80GB"], api=api) as node:
        before = _calls(node.library, PROFILE_CALLS)
        Nvml().gpu_instance_profiles(node.gpu_uuid(0))
        reads = _calls(node.library, PROFILE_CALLS) - before
    assert reads > 0
    return reads


def test_a_mig_mode_change_behind_migdras_back_is_seen_by_the_next_prepare(
    api_server: KubeApiServer, tmp_path: Path
) -> None:
    with simulated_node(tmp_path, ["H100-SXM5-80GB"] * 2, api=api_server) as node:
        service = node.service()
        first = node.claim("first", [result(_device(1, 0))])
        assert not service.prepare([first])[first.uid].error
        assert not service.unprepare([first])[first.uid].error

        admin = Nvml()  # an administrator's tool: its own NVML session, not the service's
        admin.init()
        try:
            admin.set_mig_mode(node.gpu_uuid(1), enabled=False)
        finally:
            admin.shutdown()

        listed_before = _calls(node.library, IDENTITY_CALLS)
        second = node.claim("second", [result(_device(1, 0))])
        error = service.prepare([second])[second.uid].error
        assert "MIG mode is disabled" in error
        assert node.instances() == []
        # Changing the mode may reset or re-bind the GPU and change its minor number: listed again.
        assert _calls(node.library, IDENTITY_CALLS) > listed_before


def test_unprepare_of_an_unknown_claim_succeeds_without_any_call(api_server: KubeApiServer, tmp_path: Path) -> None:
    with simulated_node(tmp_path, ["H100-SXM5-80GB"] * 2, api=api_server) as node:
        service = node.service()
        calls = node.nvml_calls()
        assert service.unprepare([ClaimRef("default", "never-prepared", "uid-x")]) == {"uid-x": UnprepareResult()}
        assert node.nvml_calls() == calls
