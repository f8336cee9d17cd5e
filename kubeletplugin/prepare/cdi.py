"""CDI specs for prepared claims: one transient spec file per claim, written atomically.

Owns the CDI side of prepare (docs/prepare.md §5; the hardware facts: docs/nvml-mig.md, "Capability
device nodes and minors" and "CDI for MIG devices"):

- file ``<cdi dir>/<driver>-claim_<claimUID>.json`` (the CDI producer's transient spec name), kind
  ``<driver>/claim``, device names ``<claimUID>-<device name>``, device IDs
  ``<driver>/claim=<claimUID>-<device name>``;
- a MIG device gets ``/dev/nvidia<gpu minor>`` and its two capability nodes
  ``/dev/nvidia-caps/nvidia-cap<gi minor>`` / ``nvidia-cap<ci minor>`` (NVIDIA #787: without them a
  container sees only the parent GPU).  Minors come from ``<proc>/driver/nvidia/capabilities/
  gpu<minor>/mig/gi<gi>/access`` and ``.../ci<ci>/access`` when present, else from the documented
  formula ``gi_minor = 3 + 135*gpu + 9*gi``, ``ci_minor = gi_minor + 1 + ci``; the character major
  comes from the ``nvidia-caps`` line of ``<proc>/devices`` (without it only the path is given and
  the runtime takes the rest from the host node);
- a whole GPU gets ``/dev/nvidia<minor>``; every spec adds the control nodes ``/dev/nvidiactl``,
  ``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools``;
- environment: ``NVIDIA_VISIBLE_DEVICES=void`` (devices arrive through CDI; the NVIDIA runtime
  hook must not inject any again -- the toolkit's own CDI convention), informational
  ``MIGDRA_MIG_UUIDS`` (the claim's MIG devices) and per device ``MIGDRA_MIG_UUID`` /
  ``MIGDRA_GPU_UUID`` and the opaque config's ``env``;
- per device, when device metadata is on, a read-only bind ``mounts`` edit of each of its requests'
  metadata files (KEP-5304, :mod:`~kubeletplugin.prepare.metadata` builds them).
- spec-level (once per claim, for every device of it), when driver files are on, the driver's
  libraries, binaries and firmware as read-only bind ``mounts`` and the ``nvidia-cdi-hook``
  ``createContainer`` hooks (:mod:`~kubeletplugin.prepare.driver_files` finds and builds them), so a
  stock CUDA image runs without its own libcuda;
- no ``deviceNodes`` at all when device nodes are off (a simulated node has no ``/dev/nvidia*``); with a
  device root other than ``/`` (``--dev-root``) each node's ``hostPath`` is under it (the runtime reads
  the node's type and numbers there: a real node of the development cluster makes them with mknod).

``write_claim_spec`` / ``ensure_claim_spec`` turn a checkpointed claim record
into its spec file.  ``build_``/``compute_`` functions are pure; ``read_``/``write_``/``ensure_``/``delete_``
touch files.  This
module never talks to NVML or the API server.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.durable import write_file_atomically
from kubeletplugin.prepare.records import ClaimRecord

log = logging.getLogger(__name__)

CDI_CLASS = "claim"
CONTROL_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
CAPS_DEVICE_DIR = "/dev/nvidia-caps"
# mig-minors layout: per GPU 15 GIs x (1 GI + 8 CIs) minors, starting after config (1) and monitor (2).
_CAP_MINOR_BASE = 3
_CAP_MINORS_PER_GPU = 135
_CAP_MINORS_PER_GI = 9
_DEVICE_FILE_MINOR = re.compile(r"^DeviceFileMinor:\s*(\d+)\s*$", re.MULTILINE)
_DEVICE_FILE_MODE = re.compile(r"^DeviceFileMode:\s*(\d+)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """A CDI ``deviceNodes`` entry; ``major``/``minor`` None: the runtime reads the host node."""

    path: str
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None

    def to_cdi(self, dev_root: str = "/") -> dict[str, Any]:
        """The entry; ``dev_root`` other than ``/``: the host node is ``<dev_root>/<path>`` (``hostPath``)."""
        node: dict[str, Any] = {"path": self.path}
        if dev_root != "/":
            node["hostPath"] = dev_root.rstrip("/") + self.path
        if self.major is not None and self.minor is not None:
            node.update(type="c", major=self.major, minor=self.minor)
            if self.file_mode is not None:
                node["fileMode"] = self.file_mode
        return node


@dataclass(frozen=True, slots=True)
class CdiDevice:
    """One device of a claim's spec: its migdra device name, nodes and environment."""

    device_name: str
    device_nodes: tuple[DeviceNode, ...]
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CommonEdits:
    """What every claim's spec on this node holds besides its devices; fixed at start-up."""

    device_nodes: bool = True
    mounts: tuple[Mapping[str, Any], ...] = ()
    hooks: tuple[Mapping[str, Any], ...] = ()
    dev_root: str = "/"  # where the host's dev/nvidia* nodes are (--dev-root)


DEFAULT_COMMON_EDITS = CommonEdits()


def cdi_kind(driver_name: str) -> str:
    return f"{driver_name}/{CDI_CLASS}"


def compute_cdi_device_name(claim_uid: str, device_name: str) -> str:
    return f"{claim_uid}-{device_name}"


def compute_cdi_device_id(driver_name: str, claim_uid: str, device_name: str) -> str:
    """The fully qualified CDI device ID kubelet passes to the runtime."""
    return f"{cdi_kind(driver_name)}={compute_cdi_device_name(claim_uid, device_name)}"


def spec_path(cdi_dir: Path, driver_name: str, claim_uid: str) -> Path:
    """``<vendor>-<class>_<claimUID>.json``: the transient spec name of the CDI producer library."""
    return cdi_dir / f"{driver_name}-{CDI_CLASS}_{claim_uid}.json"


def claim_uid_of_spec(path: Path, driver_name: str) -> str | None:
    """The claim UID a spec file of this driver belongs to; None for any other file."""
    prefix, suffix = f"{driver_name}-{CDI_CLASS}_", ".json"
    name = path.name
    if not (name.startswith(prefix) and name.endswith(suffix)) or len(name) == len(prefix) + len(suffix):
        return None
    return name[len(prefix) : -len(suffix)]


def compute_cap_minor(gpu_minor: int, gpu_instance_id: int, compute_instance_id: int | None = None) -> int:
    """The mig-minors formula (docs/nvml-mig.md, "Capability device nodes and minors"); fits every listed sample."""
    gi_minor = _CAP_MINOR_BASE + _CAP_MINORS_PER_GPU * gpu_minor + _CAP_MINORS_PER_GI * gpu_instance_id
    return gi_minor if compute_instance_id is None else gi_minor + 1 + compute_instance_id


def read_cap_access_file(
    proc_root: Path, gpu_minor: int, gpu_instance_id: int, compute_instance_id: int | None = None
) -> tuple[int, int | None] | None:
    """(DeviceFileMinor, DeviceFileMode) from the capability's ``access`` file; None when absent."""
    path = proc_root / "driver" / "nvidia" / "capabilities" / f"gpu{gpu_minor}" / "mig" / f"gi{gpu_instance_id}"
    if compute_instance_id is not None:
        path = path / f"ci{compute_instance_id}"
    try:
        text = (path / "access").read_text(encoding="utf-8")
    except OSError:
        return None
    minor = _DEVICE_FILE_MINOR.search(text)
    if minor is None:
        log.warning("%s has no DeviceFileMinor line; using the documented minor formula", path / "access")
        return None
    mode = _DEVICE_FILE_MODE.search(text)
    return int(minor.group(1)), int(mode.group(1)) if mode else None


def read_caps_major(proc_root: Path) -> int | None:
    """The dynamic character major of ``nvidia-caps`` from ``<proc>/devices``; None when absent."""
    try:
        text = (proc_root / "devices").read_text(encoding="utf-8")
    except OSError:
        return None
    in_char = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith(":"):
            in_char = stripped == "Character devices:"
            continue
        parts = stripped.split()
        if in_char and len(parts) == 2 and parts[1] == "nvidia-caps" and parts[0].isdigit():
            return int(parts[0])
    return None


def read_cap_device_node(
    proc_root: Path, caps_major: int | None, gpu_minor: int, gpu_instance_id: int, compute_instance_id: int | None
) -> DeviceNode:
    """The ``nvidia-cap<minor>`` node of a GI (``compute_instance_id`` None) or CI."""
    found = read_cap_access_file(proc_root, gpu_minor, gpu_instance_id, compute_instance_id)
    if found is not None:
        minor, mode = found
    else:
        minor, mode = compute_cap_minor(gpu_minor, gpu_instance_id, compute_instance_id), None
    return DeviceNode(f"{CAPS_DEVICE_DIR}/nvidia-cap{minor}", caps_major, minor, mode)


def read_mig_device_nodes(
    proc_root: Path, gpu_minor: int, gpu_instance_id: int, compute_instance_id: int, caps_major: int | None
) -> tuple[DeviceNode, ...]:
    """Parent GPU node plus the GI and CI capability nodes of one MIG device."""
    return (
        DeviceNode(f"/dev/nvidia{gpu_minor}"),
        read_cap_device_node(proc_root, caps_major, gpu_minor, gpu_instance_id, None),
        read_cap_device_node(proc_root, caps_major, gpu_minor, gpu_instance_id, compute_instance_id),
    )


def gpu_device_nodes(gpu_minor: int) -> tuple[DeviceNode, ...]:
    return (DeviceNode(f"/dev/nvidia{gpu_minor}"),)


def compute_cdi_version(devices: Sequence[Mapping[str, Any]], container_edits: Mapping[str, Any]) -> str:
    """The lowest CDI version that accepts the spec (the CDI library refuses a spec that uses more than its
    ``cdiVersion`` says, and the runtime then cannot resolve any of its devices): 0.5.0 once a device name
    starts with a digit (claim UIDs often do) or a device node names its ``hostPath`` (``--dev-root``),
    else 0.3.0 (the oldest the CDI library still reads).  Nothing migdra writes needs a later version."""
    edits = [container_edits, *(device["containerEdits"] for device in devices)]
    if any(device["name"][:1].isdigit() for device in devices) or any(
        "hostPath" in node for edit in edits for node in edit.get("deviceNodes") or ()
    ):
        return "0.5.0"
    return "0.3.0"


def build_cdi_spec(
    driver_name: str,
    claim_uid: str,
    devices: Sequence[CdiDevice],
    mig_uuids: Sequence[str],
    mounts: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    common: CommonEdits = DEFAULT_COMMON_EDITS,
) -> dict[str, Any]:
    """The spec document for one claim; pure and deterministic (same input, same bytes).

    ``mounts``: device name -> its ``mounts`` edits (the device metadata files of its requests,
    :mod:`~kubeletplugin.prepare.metadata`); a device without any gets no ``mounts`` key.
    ``common``: the node's spec-level edits (driver files, whether device nodes are given).
    """
    cdi_devices = []
    for device in devices:
        edits: dict[str, Any] = {"env": [f"{key}={value}" for key, value in sorted(device.env.items())]}
        if common.device_nodes:
            edits["deviceNodes"] = [node.to_cdi(common.dev_root) for node in device.device_nodes]
        device_mounts = (mounts or {}).get(device.device_name)
        if device_mounts:
            edits["mounts"] = [dict(mount) for mount in device_mounts]
        cdi_devices.append({"name": compute_cdi_device_name(claim_uid, device.device_name), "containerEdits": edits})
    env = ["NVIDIA_VISIBLE_DEVICES=void"]
    if mig_uuids:
        env.append(f"MIGDRA_MIG_UUIDS={','.join(mig_uuids)}")
    container_edits: dict[str, Any] = {"env": env}
    if common.device_nodes:
        container_edits["deviceNodes"] = [DeviceNode(path).to_cdi(common.dev_root) for path in CONTROL_DEVICE_NODES]
    if common.mounts:
        container_edits["mounts"] = [dict(mount) for mount in common.mounts]
    if common.hooks:
        container_edits["hooks"] = [dict(hook) for hook in common.hooks]
    return {
        "cdiVersion": compute_cdi_version(cdi_devices, container_edits),
        "kind": cdi_kind(driver_name),
        "devices": cdi_devices,
        "containerEdits": container_edits,
    }


def write_cdi_spec(cdi_dir: Path, driver_name: str, claim_uid: str, spec: Mapping[str, Any]) -> Path:
    """Write (or atomically replace) the claim's spec; the runtime never sees a partial file.

    Atomic, not fsynced (docs/prepare.md §5): a spec names MIG instances of this boot only.  After a
    ``kill -9`` every process reads the page cache, so the spec is whole; an fsync would only make it
    survive a crash of the kernel, after which its instances are gone, kubelet prepares the claim
    again (writing the spec anew) and start-up removes a spec no record names.  On the default
    ``/var/run/cdi`` (a tmpfs) an fsync is a no-op anyway.
    """
    path = spec_path(cdi_dir, driver_name, claim_uid)
    data = (json.dumps(spec, indent=2, sort_keys=True) + "\n").encode("utf-8")
    write_file_atomically(path, data, mode=0o644, sync=False)
    return path


def delete_cdi_spec(cdi_dir: Path, driver_name: str, claim_uid: str) -> bool:
    """Remove the claim's spec; False if there was none (idempotent).  Not fsynced, as for writing."""
    try:
        spec_path(cdi_dir, driver_name, claim_uid).unlink()
    except FileNotFoundError:
        return False
    return True


def read_cdi_spec_device_names(cdi_dir: Path, driver_name: str, claim_uid: str) -> tuple[str, ...]:
    """The device names (``gpu-0-mig-1g20gb-15-6``) the claim's spec gives containers; () when there is
    no spec or it cannot be read.  What an unprepare whose spec could not be deleted had released."""
    prefix = compute_cdi_device_name(claim_uid, "")
    try:
        spec = json.loads(spec_path(cdi_dir, driver_name, claim_uid).read_bytes())
        names = [str(device["name"]) for device in spec["devices"]]
    except (OSError, ValueError, TypeError, KeyError):
        return ()
    return tuple(name.removeprefix(prefix) for name in names if name.startswith(prefix))


def list_cdi_spec_claims(cdi_dir: Path, driver_name: str) -> set[str]:
    """Claim UIDs with a spec file of this driver in ``cdi_dir`` (other vendors' files are ignored)."""
    if not cdi_dir.is_dir():
        return set()
    return {uid for path in cdi_dir.iterdir() if (uid := claim_uid_of_spec(path, driver_name)) is not None}


def read_claim_cdi_devices(proc_root: Path, record: ClaimRecord) -> tuple[list[CdiDevice], list[str]]:
    """The spec's devices of a prepared claim record and the MIG UUIDs among them (reads ``proc_root``)."""
    caps_major = read_caps_major(proc_root)
    devices: list[CdiDevice] = []
    mig_uuids: list[str] = []
    for device in record.devices:
        intent = device.intent
        env = dict(intent.env)
        env["MIGDRA_GPU_UUID"] = intent.gpu_uuid
        if (
            device.mig_uuid is not None
            and device.gpu_instance_id is not None
            and device.compute_instance_id is not None
        ):
            nodes = read_mig_device_nodes(
                proc_root, intent.gpu_minor, device.gpu_instance_id, device.compute_instance_id, caps_major
            )
            env["MIGDRA_MIG_UUID"] = device.mig_uuid
            mig_uuids.append(device.mig_uuid)
        else:
            nodes = gpu_device_nodes(intent.gpu_minor)
        devices.append(CdiDevice(intent.device_name, nodes, env))
    return devices, mig_uuids


def write_claim_spec(
    cdi_dir: Path,
    proc_root: Path,
    driver_name: str,
    record: ClaimRecord,
    mounts: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    common: CommonEdits = DEFAULT_COMMON_EDITS,
) -> None:
    """Write the spec of a prepared claim record; nothing for a record without devices."""
    if not record.devices:
        return
    devices, mig_uuids = read_claim_cdi_devices(proc_root, record)
    spec = build_cdi_spec(driver_name, record.claim_uid, devices, mig_uuids, mounts, common)
    path = write_cdi_spec(cdi_dir, driver_name, record.claim_uid, spec)
    log.info("wrote CDI spec %s for claim %s (UID %s)", path, record.label, record.claim_uid)


def ensure_claim_spec(
    cdi_dir: Path,
    proc_root: Path,
    driver_name: str,
    record: ClaimRecord,
    mounts: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    common: CommonEdits = DEFAULT_COMMON_EDITS,
) -> None:
    """Write the spec of a prepared claim record again if its file is missing."""
    if record.devices and not spec_path(cdi_dir, driver_name, record.claim_uid).exists():
        log.warning(
            "CDI spec of prepared claim %s (UID %s) is missing; writing it again", record.label, record.claim_uid
        )
        write_claim_spec(cdi_dir, proc_root, driver_name, record, mounts, common)
