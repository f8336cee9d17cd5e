"""Harness for the prepare tests (no tests here): a simulated node, a local API server, claims, a service.

Also the child process of the crash-recovery tests: ``python prepare_harness.py '<json>'`` runs
one PrepareService on the given simulator state, checkpoint and CDI directories against the given
API server, prepares the given claims and prints the results -- unless a crash point or a simulator
fault plan (``MIGDRA_SIM_FAULTS``) kills it first.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import pynvml
import pytest
from kubernetes import client

from dra_driver.kube.client import Client
from dra_driver.kube.config import load_kubeconfig_file, new_api_client
from dra_driver.kubelet.calls import ClaimRef
from dra_driver.mig.catalog import Placement
from dra_driver.nvml import sim
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.settings import build_nvml_settings
from dra_driver.nvml.sim import SimulatedNvmlLibrary
from kubeletplugin.prepare.checkpoint import CheckpointStore
from kubeletplugin.prepare.service import PrepareService, service_from_settings
from kubeletplugin.settings import PrepareSettings
from tests.kube_apiserver import KubeApiServer

ApiServer = KubeApiServer | KubeApiServer

NODE = "node-a"
DRIVER = "gpu.migdra.io"
BOOT_ID = "11111111-2222-3333-4444-555555555555"
MUTATING_NVML_SYMBOLS = (
    "nvmlDeviceSetMigMode",
    "nvmlDeviceCreateGpuInstance",
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlGpuInstanceDestroy",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlGpuInstanceCreateComputeInstanceWithPlacement",
    "nvmlComputeInstanceDestroy",
)


def result(device: str, request: str = "gpu", driver: str = DRIVER, pool: str = NODE, **extra: Any) -> dict[str, Any]:
    """One ``status.allocation.devices.results`` entry."""
    return {"request": request, "driver": driver, "pool": pool, "device": device, **extra}


def opaque(
    parameters: Any, requests: Sequence[str] = (), source: str = "FromClaim", driver: str = DRIVER
) -> dict[str, Any]:
    """One ``status.allocation.devices.config`` entry."""
    entry: dict[str, Any] = {"source": source, "opaque": {"driver": driver, "parameters": parameters}}
    if requests:
        entry["requests"] = list(requests)
    return entry


def mig_config(**env: str) -> dict[str, Any]:
    return {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "MigDeviceConfig", "env": env}


def create_claim(
    api_client: client.ApiClient,
    name: str,
    results: Sequence[dict[str, Any]],
    config: Sequence[dict[str, Any]] = (),
    namespace: str = "default",
) -> ClaimRef:
    """A ResourceClaim with ``status.allocation`` set through the status subresource, as the scheduler does.

    Results with ``adminAccess`` put the claim where kube-apiserver accepts it: its requests ask for admin
    access, and its namespace (``admin-access`` unless given) carries the label that allows it.
    """
    admin = {r["request"].split("/")[0] for r in results if r.get("adminAccess")}
    if admin and namespace == "default":
        namespace = ADMIN_NAMESPACE
    if admin:
        ensure_admin_namespace(api_client, namespace)
    requests = sorted(
        {r["request"].split("/")[0] for r in results} | {q for c in config for q in c.get("requests", [])}
    )
    resource = client.ResourceV1Api(api_client)
    created = resource.create_namespaced_resource_claim(
        namespace,
        client.ResourceV1ResourceClaim.from_dict(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": r, "exactly": {"deviceClassName": "mig.gpu.migdra.io", "adminAccess": r in admin}}
                            for r in requests
                        ]
                    }
                },
            }
        ),
    )
    body = api_client.sanitize_for_serialization(created)
    body.get("metadata", {}).pop("managedFields", None)
    body["status"] = {
        "allocation": {
            "devices": {"results": list(results), "config": list(config)},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]
            },
        }
    }
    # As kube-scheduler writes it: the opaque parameters as canonical JSON (keys sorted, no spaces), the
    # bytes it copies from a claim or class that kubectl or helm created.  The API server keeps those
    # bytes, and its server-side apply of the claim's status compares them with its own re-encoding
    # (docs/claim-status.md, "Opaque parameters").
    answer = api_client.call_api(
        *api_client.param_serialize(
            "PUT",
            f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}/status",
            # YAML, of which JSON is a part: the client sends a text body of that type as it is
            header_params={"Content-Type": "application/yaml", "Accept": "application/json"},
            body=json.dumps(body, sort_keys=True, separators=(",", ":")),
            auth_settings=["BearerToken"],
        )
    )
    answer.read()
    assert answer.status == 200, f"allocating claim {namespace}/{name}: {answer.status} {answer.data[:500]!r}"
    return ClaimRef(namespace=namespace, name=name, uid=created.metadata.uid)


ADMIN_NAMESPACE = "admin-access"
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
"""The namespace label without which kube-apiserver refuses an allocation with admin access."""


def ensure_admin_namespace(api_client: client.ApiClient, namespace: str) -> None:
    """``namespace`` with the admin-access label (created when missing)."""
    core = client.CoreV1Api(api_client)
    body = {"metadata": {"name": namespace, "labels": {ADMIN_ACCESS_LABEL: "true"}}}
    try:
        core.create_namespace(body)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
        core.patch_namespace(namespace, body)


def read_claim_json(api_client: client.ApiClient, ref: ClaimRef) -> dict[str, Any]:
    response = client.ResourceV1Api(api_client).read_namespaced_resource_claim(
        ref.name, ref.namespace, _preload_content=False
    )
    return json.loads(response.data)


@dataclass
class Node:
    """One simulated node: NVML over a state file, the API server, and the prepare directories."""

    root: Path
    api: ApiServer
    api_client: client.ApiClient
    nvml: Nvml
    library: SimulatedNvmlLibrary
    services: list[PrepareService] = field(default_factory=list)

    @property
    def state_path(self) -> Path:
        return self.root / "nvml-sim.json"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def proc_root(self) -> Path:
        return self.root / "proc"

    def record_path(self, uid: str) -> Path:
        """The checkpoint's record file of claim ``uid`` (this boot's)."""
        return CheckpointStore(self.state_dir, BOOT_ID).claim_path(uid)

    def service(self, *, start: bool = True, nvml: Nvml | None = None, **kwargs: Any) -> PrepareService:
        """A PrepareService of this node (started unless ``start=False``); closed at the end of the test."""
        options: dict[str, Any] = {
            "nvml": nvml or self.nvml,
            "client": Client(api_client=self.api_client),
            "node_name": NODE,
            "driver_name": DRIVER,
            "cdi_dir": self.cdi_dir,
            "state_dir": self.state_dir,
            "proc_root": self.proc_root,
            "read_boot_id": lambda: BOOT_ID,
            "workers": 4,
            "state_lock_timeout": 5.0,
            **kwargs,
        }
        service = PrepareService(**options)
        if start:
            service.start()
        self.services.append(service)
        return service

    def close_services(self) -> None:
        while self.services:
            with contextlib.suppress(Exception):
                self.services.pop().close()

    def claim(self, name: str, results: Sequence[dict[str, Any]], config: Sequence[dict[str, Any]] = ()) -> ClaimRef:
        return create_claim(self.api_client, name, results, config)

    def gpu_uuid(self, index: int = 0) -> str:
        return sim.snapshot(self.state_path).gpus[index].uuid

    def instances(self) -> list[tuple[int, int, int, int, list[tuple[int, int, str]]]]:
        """Every GI of the machine: (GPU index, GI ID, profile ID, start, [(CI ID, CI profile, MIG UUID)])."""
        return [
            (
                gpu.index,
                gi.gpu_instance_id,
                gi.profile_id,
                gi.placement.start,
                [(ci.compute_instance_id, ci.ci_profile_id, ci.uuid) for ci in gi.compute_instances],
            )
            for gpu in sim.snapshot(self.state_path).gpus
            for gi in gpu.gpu_instances
        ]

    def foreign_instance(self, gpu: int, profile_id: int, start: int, size: int) -> tuple[int, str]:
        """A GI + full CI created behind migdra's back (an operator's nvidia-smi): (GI ID, MIG UUID)."""
        uuid = self.gpu_uuid(gpu)
        gi = self.nvml.create_gpu_instance(uuid, profile_id, Placement(start=start, size=size))
        profile = next(p for p in self.nvml.gpu_instance_profiles(uuid) if p.profile_id == profile_id)
        full = next(
            c
            for c in self.nvml.compute_instance_profiles(uuid, gi.gpu_instance_id)
            if c.multiprocessor_count == profile.multiprocessor_count
        )
        ci = self.nvml.create_compute_instance(uuid, gi.gpu_instance_id, full.ci_profile_index)
        return gi.gpu_instance_id, ci.mig_uuid

    def nvml_calls(self) -> int:
        """NVML C calls this process made so far (the simulator counts every symbol)."""
        return sum(self.library.faults.calls(name) for name in dir(self.library) if name.startswith("nvml"))

    def nvml_mutations(self) -> int:
        """NVML calls of this process so far that change the hardware (create, destroy, MIG mode)."""
        return sum(self.library.faults.calls(name) for name in MUTATING_NVML_SYMBOLS)


@contextlib.contextmanager
def simulated_node(
    root: Path, gpus: Sequence[str], *, api: ApiServer, mig_enabled: bool = True, **install: Any
) -> Iterator[Node]:
    """A node with ``gpus`` in ``root``, its claims on ``api`` (the ``kube_api_server`` or ``api_server``
    fixture), reached as its admin kubeconfig says."""
    root.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        assert api.kubeconfig_path is not None
        configuration = load_kubeconfig_file(api.kubeconfig_path, what="the test's kubeconfig")
        api_client = stack.enter_context(new_api_client(configuration, retries=0))
        library = sim.install(root / "nvml-sim.json", gpus=list(gpus), mig_enabled=mig_enabled, **install)
        stack.callback(sim.uninstall)
        nvml = Nvml()
        nvml.init()
        stack.callback(_shutdown, nvml)
        node = Node(root, api, api_client, nvml, library)
        stack.callback(node.close_services)
        yield node


_MS_RDONLY, _MS_REMOUNT, _MS_BIND = 0x1, 0x20, 0x1000
_MNT_DETACH = 0x2


@contextlib.contextmanager
def read_only_directory(path: Path) -> Iterator[None]:
    """``path`` on a read-only mount while the block runs, as a node's CDI directory on a read-only file
    system is: every write, create, rename or unlink in it fails with EROFS, for root too, and the
    files already there stay visible (so an unprepare finds the spec it cannot delete).

    Why a mount: the tests run as root here, and root ignores permission bits (``chmod 0555`` changes
    nothing for it); only the mount's read-only flag holds for everyone.  ``path`` is bind-mounted
    onto itself, then remounted read-only (mount(2) needs CAP_SYS_ADMIN: where the test lacks it, it
    is skipped, naming why).  The mount is detached at the end, whatever happened.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    target = str(path).encode()
    if libc.mount(target, target, None, _MS_BIND, None) != 0:
        reason = os.strerror(ctypes.get_errno())
        pytest.skip(f"a read-only bind mount of {path} needs CAP_SYS_ADMIN: mount(2) said {reason}")
    try:
        if libc.mount(None, target, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None) != 0:
            raise OSError(ctypes.get_errno(), f"remounting {path} read-only failed")
        yield
    finally:
        if libc.umount2(target, _MNT_DETACH) != 0:
            raise OSError(ctypes.get_errno(), f"unmounting {path} failed")


class HeldCall:
    """Holds every call of one method of an object (``node.nvml.create_compute_instance``) until released.

    A test that must look at a prepare in the middle of an NVML call stops it there for as long as it
    needs; a simulated latency only gives it a window, which a loaded machine makes it miss.  Leaving
    the ``with`` block releases the call, so a failing test never leaves a prepare hanging::

        with HeldCall(node.nvml, "create_compute_instance") as held:
            prepare = Background(service, [ref])
            held.wait_entered()
            ...  # the GI exists, its CI does not yet
    """

    def __init__(self, target: object, method: str, timeout: float = 30.0, *, first_only: bool = False) -> None:
        """``first_only``: hold the first call alone; later calls (the test's own, other threads') pass."""
        self.target = target
        self.method = method
        self.timeout = timeout
        self.first_only = first_only
        self.entered = threading.Event()
        self._released = threading.Event()
        self._original = getattr(target, method)
        self._claimed = threading.Lock()
        self._holding = False

    def _held(self, *args: Any, **kwargs: Any) -> Any:
        with self._claimed:
            hold = not (self.first_only and self._holding)
            self._holding = True
        if hold:
            self.entered.set()
            if not self._released.wait(self.timeout):
                raise AssertionError(f"{self.method} was held for {self.timeout} s and never released")
        return self._original(*args, **kwargs)

    def wait_entered(self) -> None:
        """Wait (bounded) until something calls the method."""
        assert self.entered.wait(self.timeout), f"nothing called {self.method} within {self.timeout} s"

    def release(self) -> None:
        """Let the held call, and any later one, through."""
        self._released.set()

    def __enter__(self) -> HeldCall:
        setattr(self.target, self.method, self._held)  # an instance attribute, shadowing the method
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()
        delattr(self.target, self.method)


class HeldAfter:
    """Holds the first call of one method *after* it returned, until released: the caller stands right after
    the NVML call (``node.nvml.create_gpu_instance``: the GI exists, its ID is not recorded yet) while the test
    lets something else run.  Later calls pass.  Leaving the ``with`` block releases it, as :class:`HeldCall`.
    """

    def __init__(self, target: object, method: str, timeout: float = 30.0) -> None:
        self.target = target
        self.method = method
        self.timeout = timeout
        self.returned = threading.Event()
        self._released = threading.Event()
        self._original = getattr(target, method)
        self._claimed = threading.Lock()
        self._holding = False

    def _held(self, *args: Any, **kwargs: Any) -> Any:
        value = self._original(*args, **kwargs)
        with self._claimed:
            hold = not self._holding
            self._holding = True
        if hold:
            self.returned.set()
            if not self._released.wait(self.timeout):
                raise AssertionError(f"the caller of {self.method} was held for {self.timeout} s and never released")
        return value

    def wait_returned(self) -> None:
        """Wait (bounded) until the first call returned (its caller is now held)."""
        assert self.returned.wait(self.timeout), f"no call of {self.method} returned within {self.timeout} s"

    def release(self) -> None:
        self._released.set()

    def __enter__(self) -> HeldAfter:
        setattr(self.target, self.method, self._held)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.release()
        delattr(self.target, self.method)


class Background:
    """``service.prepare(refs)`` (or ``unprepare``) on another thread, as kubelet's gRPC call would run it."""

    def __init__(self, service: PrepareService, refs: Sequence[ClaimRef], *, unprepare: bool = False) -> None:
        self.results: dict[str, Any] = {}
        call = service.unprepare if unprepare else service.prepare
        self._thread = threading.Thread(target=lambda: self.results.update(call(refs)), daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float = 30.0) -> dict[str, Any]:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the call did not finish"
        return self.results


def _shutdown(nvml: Nvml) -> None:
    with contextlib.suppress(pynvml.NVMLError, Exception):
        nvml.shutdown()


def _child(arguments: dict[str, Any]) -> None:
    """Crash-test child: one service, prepare the claims, print the results (if it survives)."""
    # MIGDRA_SIM_FAULTS, when set, is this process's fault plan: read as the node process reads it.
    faults = build_nvml_settings(nvml="simulated", sim_state=arguments["state_path"]).sim_faults
    sim.install(arguments["state_path"], faults=faults)
    nvml = Nvml()
    nvml.init()
    # The crash point comes from MIGDRA_TEST_CRASH_AT, as in the node process.
    settings = PrepareSettings(
        cdi_dir=Path(arguments["cdi_dir"]),
        state_dir=Path(arguments["state_dir"]),
        # the device metadata files under the test's directory, never the host's /var/lib/kubelet/plugins
        plugin_data_dir=Path(arguments["state_dir"]),
        proc_root=Path(arguments["proc_root"]),
    )
    kubeconfig = load_kubeconfig_file(Path(arguments["kubeconfig"]), what="the test's kubeconfig")
    with client.ApiClient(kubeconfig) as api_client:
        service = service_from_settings(
            settings,
            nvml=nvml,
            client=Client(api_client=api_client),
            node_name=NODE,
            driver_name=DRIVER,
            read_boot_id=lambda: BOOT_ID,
        )
        with service:
            refs = [ClaimRef(**ref) for ref in arguments["claims"]]
            results = {uid: r.error for uid, r in service.prepare(refs).items()}
            if arguments.get("unprepare"):
                results.update({uid: r.error for uid, r in service.unprepare(refs).items()})
            service.flush_reports(5)
    print(json.dumps(results))


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
