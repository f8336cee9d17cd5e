"""GPU faults become device taints, end to end: the real `migdra kubelet-plugin` process on the local
API server over the simulated NVML, an XID injected from another process (`migdra sim xid`), the
allocator kube-scheduler runs (dra_driver.tools.allocation, which honours NoSchedule taints), a restart, and
the admin's `migdra health clear`."""

from __future__ import annotations

import subprocess
from typing import Any

from dra_driver.kube.client import SLICES, Client
from dra_driver.tools.allocation import DEFAULT_FEATURES, allocate
from tests.e2e.test_kubelet_plugin_process import PluginProcess, _stop
from tests.plugin_command import DRIVER, MIGDRA, NODE
from tests.sim_objects import claim, claim_view, mig_request, migdra_device_classes
from tests.waiting import wait_for

XID_KEY = f"{DRIVER}/xid"


def _devices(api: Client) -> dict[str, dict[str, Any]]:
    """The node's published devices by name, from one complete pool generation (else empty)."""
    slices = [s for s in api.list(SLICES)[0] if s["spec"]["pool"]["name"] == NODE]
    generations = {s["spec"]["pool"]["generation"] for s in slices}
    if len(generations) != 1 or len(slices) != slices[0]["spec"]["pool"]["resourceSliceCount"]:
        return {}
    return {d["name"]: d for s in slices for d in s["spec"].get("devices", [])}


def _tainted(api: Client) -> dict[str, list[dict[str, Any]]] | None:
    devices = _devices(api)
    if len(devices) != 2 * 25:  # two H100s: every exclusive placement (no shared devices unless enabled)
        return None
    return {name: d["taints"] for name, d in devices.items() if d.get("taints")}


def _fits(api: Client, count: int) -> list[str] | None:
    """The devices kube-scheduler's allocator would give a claim of ``count`` 1g.10gb devices on the node."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}
    slices = [s for s in api.list(SLICES)[0] if s["spec"]["pool"]["name"] == NODE]
    found = allocate(
        [claim_view(claim("new", mig_request(count=count)))],
        node,
        slices,
        migdra_device_classes(),
        [],
        DEFAULT_FEATURES,
    )
    return None if found is None else [r["device"] for r in found[0]["devices"]["results"]]


def _migdra(*args: str) -> str:
    done = subprocess.run([MIGDRA, *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_xid_on_gpu_1_taints_its_devices_survives_a_restart_and_new_claims_land_elsewhere(
    plugin: PluginProcess,
) -> None:
    process = plugin.start()
    api = Client(configuration=plugin.api.configuration())
    assert wait_for("the untainted pool", lambda: _tainted(api) == {} or None) is True
    assert len(_fits(api, 14) or []) == 14  # both GPUs' seven 1g.10gb placements

    _migdra("sim", "xid", "--state", str(plugin.state), "--gpu", "1", "--xid", "79")
    tainted = wait_for("GPU 1's devices tainted", lambda: _tainted(api) or None)
    assert sorted(tainted) == sorted(name for name in _devices(api) if name.startswith("gpu-1-"))
    assert {(t["key"], t.get("value"), t["effect"]) for ts in tainted.values() for t in ts} == {
        (XID_KEY, "79", "NoSchedule")
    }
    assert all(name.startswith("gpu-0-") for name in _fits(api, 7) or ["none"])
    assert _fits(api, 8) is None  # GPU 1's placements are not allocatable any more

    # A restart: NVML does not replay the XID, the taint store does.  The slices are deleted meanwhile,
    # so the ones that come back are the new process's.
    _stop(process)
    for item in api.list(SLICES)[0]:
        api.delete(SLICES, None, item["metadata"]["name"])
    process = plugin.start()
    assert wait_for("the pool published again", lambda: _tainted(api)) == tainted  # same taints, same timeAdded

    assert "79" in _migdra("health", "list", "--state-dir", str(plugin.root / "plugin"))
    _migdra("health", "clear", "--state-dir", str(plugin.root / "plugin"), "--gpu", "1")
    assert wait_for("the taints cleared", lambda: _tainted(api) == {} or None) is True
    _stop(process)
