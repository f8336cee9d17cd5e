"""KEP-5304 device metadata: what a container can read about the devices of its claim, at a well-known path.

Owns the metadata side of prepare, in the format Kubernetes 1.37 (beta) defines and its kubelet
plugin helper (``k8s.io/dynamic-resource-allocation/kubeletplugin``) writes:

- per claim and **request**, on the host, ``<plugin data dir>/dra-device-metadata/<namespace>_<claim
  name>/<request>/metadata.json``;
- bind-mounted read-only into the container (a CDI ``mounts`` edit on every device of that request,
  in the claim's CDI spec) at ``/var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim
  name>/<request>/<driver>-metadata.json``, or, for a claim generated from a ResourceClaimTemplate
  (annotation ``resource.kubernetes.io/pod-claim-name`` on the claim),
  ``.../resourceclaimtemplates/<pod claim name>/<request>/<driver>-metadata.json``, where the pod claim
  name is the pod's ``spec.resourceClaims[].name`` (the generated claim's name is not predictable);
  for a request with subrequests only the top-level request names the directory;
- the file is a JSON *stream* of ``DeviceMetadata`` objects, the same metadata once per API version,
  newest first (``metadata.resource.k8s.io/v1beta1``, then ``v1alpha1`` for older readers); each
  object: ``kind``, ``apiVersion``, ``metadata: {name, namespace, uid, generation: 1}``, optional
  ``podClaimName``, ``requests: [{name: <request or request/subrequest>, devices: [{driver, pool, name,
  attributes}]}]``; attributes are ResourceSlice ``DeviceAttribute`` values (``{"string": ...}``,
  ``{"int": ...}``, ``{"version": ...}``, ``{"bool": ...}``).

A device's attributes are exactly those the slice publisher publishes for it (the device model's own
:func:`~dra_driver.devicemodel.pool.build_pool` on that GPU, never a second table), plus what exists
only once the instance does: ``migUUID``, ``gpuInstanceID``, ``computeInstanceID`` (the placement is
published already, as ``placementStart`` / ``placementSize``).

``build_``/``compute_``/``parse_`` functions are pure; ``read_`` reads NVML (never mutates), ``write_``
/ ``remove_`` / ``list_`` touch files.  Every path is built from names checked to be DNS labels or
subdomains, so no input can name a file outside the metadata directory.  This module never talks to
the API server and never takes a lock: the service holds the claim's lock around every write and
removal of that claim's files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.naming import dns_subdomain_problem
from dra_driver.devicemodel.pool import build_pool
from dra_driver.durable import parse_temporary_name, process_is_gone, write_file_atomically
from dra_driver.host.pci import normalise_pci_bus_id, pcie_root
from dra_driver.nvml.backend import Nvml
from dra_driver.nvml.errors import NvmlError
from dra_driver.nvml.types import GpuInfo, GpuInstanceProfileInfo, GpuInventory, NodeInventory
from kubeletplugin.prepare.devices import NodeGpus
from kubeletplugin.prepare.errors import DeviceMetadataError, RealizeError
from kubeletplugin.prepare.records import ClaimRecord, DeviceRecord

log = logging.getLogger(__name__)

METADATA_DIR = "dra-device-metadata"
"""Under the plugin data directory on the host (the Go helper's ``metadataSubDir``)."""
METADATA_FILE = "metadata.json"
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
RESOURCE_CLAIMS_SUBDIR = "resourceclaims"
RESOURCE_CLAIM_TEMPLATES_SUBDIR = "resourceclaimtemplates"
METADATA_FILE_SUFFIX = "-metadata.json"
API_GROUP = "metadata.resource.k8s.io"
API_VERSIONS = ("v1beta1", "v1alpha1")
"""The stream's order: newest first (readers take the first version they know; v1beta1 is required)."""
KIND = "DeviceMetadata"
MOUNT_OPTIONS = ("ro", "bind")
FILE_MODE = 0o644  # the workload reads it as any user; it holds no secret
# Attributes that exist only once the instance does (the claim status's data keys, same names).
MIG_UUID_ATTRIBUTE = "migUUID"
GPU_INSTANCE_ID_ATTRIBUTE = "gpuInstanceID"
COMPUTE_INSTANCE_ID_ATTRIBUTE = "computeInstanceID"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_MAX_LABEL = 63
_MAX_CLAIM_NAME = 253


# -- the file's format ----------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True, validate_by_alias=True)


class DeviceAttribute(_Model):
    """A ResourceSlice ``DeviceAttribute``: exactly one of its value fields is set."""

    int_value: int | None = Field(default=None, alias="int")
    bool_value: bool | None = Field(default=None, alias="bool")
    string: str | None = None
    version: str | None = None

    @model_validator(mode="after")
    def _one_value(self) -> DeviceAttribute:
        values = [v for v in (self.int_value, self.bool_value, self.string, self.version) if v is not None]
        if len(values) != 1:
            raise ValueError("a device attribute has exactly one of int, bool, string, version")
        return self


class MetadataDevice(_Model):
    driver: str
    pool: str
    name: str
    attributes: dict[str, DeviceAttribute] | None = None


class MetadataRequest(_Model):
    name: str = Field(description="the request as the allocation names it: <request> or <request>/<subrequest>")
    devices: tuple[MetadataDevice, ...] = ()


class ClaimObjectMeta(_Model):
    name: str
    namespace: str
    uid: str
    generation: int = Field(default=1, description="of the metadata: 1 when written, +1 per update")


class DeviceMetadata(_Model):
    """One object of the stream (field order = the upstream encoder's key order)."""

    kind: str = KIND
    api_version: str = Field(default=f"{API_GROUP}/{API_VERSIONS[0]}", alias="apiVersion")
    metadata: ClaimObjectMeta
    pod_claim_name: str | None = Field(default=None, alias="podClaimName")
    requests: tuple[MetadataRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class RequestMetadata:
    """One request's metadata file: where it lies, where the container sees it, what it says."""

    request: str  # the top-level request name: the directory
    host_path: Path
    container_path: str
    metadata: DeviceMetadata


# -- paths (pure) ---------------------------------------------------------------------------------


def _label_problem(value: str) -> str | None:
    if not value:
        return "is empty"
    if len(value) > _MAX_LABEL or not _DNS_LABEL.match(value):
        return f"{value!r} is not a DNS label (lower-case letters, digits and '-', at most {_MAX_LABEL})"
    return None


def compute_base_request(request: str) -> str:
    """``gpu/high-memory`` -> ``gpu``: only the top-level request names the directory."""
    return request.split("/", 1)[0]


def compute_metadata_path_problem(
    namespace: str, name: str, requests: Iterable[str], pod_claim_name: str | None
) -> str | None:
    """Why these names cannot name metadata files (one line naming the field), or None; pure.

    The API server lets none of these through, so a problem means input that did not come from it;
    checking here is what keeps every path inside the metadata directory.
    """
    problem = _label_problem(namespace)
    if problem is not None:
        return f"namespace {problem}"
    problem = dns_subdomain_problem(name, _MAX_CLAIM_NAME)
    if problem is not None:
        return f"claim name {name!r} {problem}"
    for request in requests:
        parts = request.split("/")
        if len(parts) > 2 or any(_label_problem(part) is not None for part in parts):
            return f"request {request!r} is not <DNS label> or <DNS label>/<DNS label>"
    if pod_claim_name is not None:
        problem = _label_problem(pod_claim_name)
        if problem is not None:
            return f"pod claim name (annotation resource.kubernetes.io/pod-claim-name) {problem}"
    return None


def claim_directory_name(namespace: str, name: str) -> str:
    """``<namespace>_<claim name>``: neither may contain ``_``, so the name parses back."""
    return f"{namespace}_{name}"


def parse_claim_directory_name(directory: str) -> tuple[str, str] | None:
    """(namespace, claim name) of a claim directory; None for any name migdra does not write."""
    namespace, sep, name = directory.partition("_")
    if not sep or compute_metadata_path_problem(namespace, name, (), None) is not None:
        return None
    return namespace, name


def compute_host_path(root: Path, namespace: str, name: str, request: str) -> Path:
    """``<root>/dra-device-metadata/<namespace>_<claim>/<request>/metadata.json`` (names already checked)."""
    return root / METADATA_DIR / claim_directory_name(namespace, name) / compute_base_request(request) / METADATA_FILE


def compute_container_path(driver_name: str, name: str, pod_claim_name: str | None, request: str) -> str:
    """Where the container reads the request's file (``resourceclaimtemplates/<pod claim name>/...``
    for a claim generated from a template, else ``resourceclaims/<claim name>/...``)."""
    subdir, claim = (
        (RESOURCE_CLAIM_TEMPLATES_SUBDIR, pod_claim_name) if pod_claim_name else (RESOURCE_CLAIMS_SUBDIR, name)
    )
    return f"{CONTAINER_DIR}/{subdir}/{claim}/{compute_base_request(request)}/{driver_name}{METADATA_FILE_SUFFIX}"


def _checked(record: ClaimRecord) -> None:
    requests = [r for d in record.devices for r in d.intent.request_names]
    problem = compute_metadata_path_problem(record.namespace, record.name, requests, record.pod_claim_name)
    if problem is not None:
        raise DeviceMetadataError(f"device metadata cannot be written: {problem}")


# -- content (pure) -------------------------------------------------------------------------------


def compute_published_attributes(
    driver_name: str,
    driver_version: str,
    cuda_driver_version: str,
    gpu: GpuInfo,
    profiles: Sequence[GpuInstanceProfileInfo],
    device_name: str,
) -> dict[str, DeviceAttribute]:
    """The attributes the slice publisher publishes for ``device_name`` of ``gpu`` ({} if it publishes none).

    The device model itself computes them, on an inventory of that one GPU without instances (an
    instance only withholds placements; it never changes an attribute).  Pure, so the answer for a
    GPU is kept (a prepare then costs a dictionary lookup, not a device-model build per device).
    """
    published = _published_attributes_of_gpu(driver_name, driver_version, cuda_driver_version, gpu, tuple(profiles))
    return dict(published.get(device_name, {}))


@functools.lru_cache(maxsize=256)
def _published_attributes_of_gpu(
    driver_name: str,
    driver_version: str,
    cuda_driver_version: str,
    gpu: GpuInfo,
    profiles: tuple[GpuInstanceProfileInfo, ...],
) -> Mapping[str, Mapping[str, DeviceAttribute]]:
    inventory = NodeInventory(
        driver_version=driver_version,
        cuda_driver_version=cuda_driver_version,
        gpus=(GpuInventory(gpu=gpu, profiles=profiles, gpu_instances=()),),
    )
    pool = build_pool(inventory, DeviceModelConfig(driver_name=driver_name))
    attributes: dict[str, Mapping[str, DeviceAttribute]] = {}
    for device in pool.devices:
        published = device.to_api()["attributes"]
        assert isinstance(published, dict)
        attributes[device.name] = {key: DeviceAttribute.model_validate(value) for key, value in published.items()}
    return attributes


def compute_runtime_attributes(device: DeviceRecord) -> dict[str, DeviceAttribute]:
    """The realized instance's identity, known only after prepare (none for a whole GPU)."""
    attributes: dict[str, DeviceAttribute] = {}
    if device.mig_uuid is not None:
        attributes[MIG_UUID_ATTRIBUTE] = DeviceAttribute(string=device.mig_uuid)
    if device.mig_uuid is not None and device.gpu_instance_id is not None:
        attributes[GPU_INSTANCE_ID_ATTRIBUTE] = DeviceAttribute(int_value=device.gpu_instance_id)
    if device.mig_uuid is not None and device.compute_instance_id is not None:
        attributes[COMPUTE_INSTANCE_ID_ATTRIBUTE] = DeviceAttribute(int_value=device.compute_instance_id)
    return attributes


def build_claim_metadata(
    record: ClaimRecord,
    driver_name: str,
    pool_name: str,
    root: Path,
    published: Mapping[str, Mapping[str, DeviceAttribute]],
) -> list[RequestMetadata]:
    """Every request's file of a prepared claim, in request order; pure.

    ``published``: device name -> its published attributes.  A device serving several requests is
    in each of their files; a request's subrequest is its entry's name, its top-level name the
    directory.  Raises :class:`DeviceMetadataError` for names that cannot name files.
    """
    _checked(record)
    by_request: dict[str, dict[str, list[MetadataDevice]]] = {}
    for device in record.devices:
        attributes = {**published.get(device.intent.device_name, {}), **compute_runtime_attributes(device)}
        entry = MetadataDevice(
            driver=driver_name,
            pool=pool_name,
            name=device.intent.device_name,
            attributes=dict(sorted(attributes.items())) or None,
        )
        for request in device.intent.request_names:
            by_request.setdefault(compute_base_request(request), {}).setdefault(request, []).append(entry)
    meta = ClaimObjectMeta(name=record.name, namespace=record.namespace, uid=record.claim_uid)
    return [
        RequestMetadata(
            request=base,
            host_path=compute_host_path(root, record.namespace, record.name, base),
            container_path=compute_container_path(driver_name, record.name, record.pod_claim_name, base),
            metadata=DeviceMetadata(
                metadata=meta,
                pod_claim_name=record.pod_claim_name,
                requests=tuple(MetadataRequest(name=ref, devices=tuple(devs)) for ref, devs in refs.items()),
            ),
        )
        for base, refs in by_request.items()
    ]


def build_metadata_mounts(record: ClaimRecord, driver_name: str, root: Path) -> dict[str, list[dict[str, Any]]]:
    """Device name -> the CDI ``mounts`` that give a container its requests' metadata files; pure.

    Every device of a request carries that request's mount (CDI replaces a mount of the same
    container path, so a request of several devices mounts its file once).  Raises
    :class:`DeviceMetadataError` for names that cannot name files.
    """
    _checked(record)
    mounts: dict[str, list[dict[str, Any]]] = {}
    for device in record.devices:
        bases = dict.fromkeys(compute_base_request(r) for r in device.intent.request_names)
        mounts[device.intent.device_name] = [
            {
                "hostPath": str(compute_host_path(root, record.namespace, record.name, base)),
                "containerPath": compute_container_path(driver_name, record.name, record.pod_claim_name, base),
                "options": list(MOUNT_OPTIONS),
            }
            for base in bases
        ]
    return mounts


def encode_metadata_stream(metadata: DeviceMetadata) -> bytes:
    """The file's bytes: the object once per API version, newest first, each pretty-printed on its own."""
    parts = []
    for version in API_VERSIONS:
        versioned = metadata.model_copy(update={"api_version": f"{API_GROUP}/{version}"})
        document = versioned.model_dump(mode="json", by_alias=True, exclude_none=True)
        parts.append(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    return "".join(parts).encode("utf-8")


def parse_metadata_stream(data: bytes) -> list[DeviceMetadata]:
    """Every object of a metadata file, in order; raises ``ValueError`` for anything else."""
    text = data.decode("utf-8")
    decoder = json.JSONDecoder()
    objects: list[DeviceMetadata] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            return objects
        document, position = decoder.raw_decode(text, position)
        try:
            objects.append(DeviceMetadata.model_validate(document))
        except ValidationError as e:
            raise ValueError(str(e)) from e


def parse_metadata_claim_uid(data: bytes) -> str | None:
    """The claim UID a metadata file belongs to; None when it is not a metadata file migdra can read."""
    try:
        objects = parse_metadata_stream(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return objects[0].metadata.uid if objects else None


# -- NVML reads -----------------------------------------------------------------------------------


class DeviceAttributeReader:
    """The published attributes of a record's devices, read as the publisher reads them.

    Only the GPUs the record's devices name are read (through the service's :class:`NodeGpus`: MIG
    mode each time, profiles per mode); the driver versions are read once per NVML session, which
    they cannot change within.  The PCIe root comes from sysfs, as :func:`~dra_driver.nvml.inventory.
    read_inventory` takes it.  Thread-safe; reads NVML, changes nothing.
    """

    def __init__(self, nvml: Nvml, gpus: NodeGpus, driver_name: str, sysfs: Path = Path("/sys")) -> None:
        self._nvml = nvml
        self._gpus = gpus
        self._driver_name = driver_name
        self._sysfs = sysfs
        self._versions: tuple[str, str] | None = None

    def read(self, record: ClaimRecord) -> dict[str, dict[str, DeviceAttribute]]:
        """Device name -> published attributes; raises :class:`RealizeError` when NVML fails (retryable)."""
        names = [device.intent.device_name for device in record.devices]
        try:
            if self._versions is None:
                self._versions = (self._nvml.driver_version(), self._nvml.cuda_driver_version())
            topology = {entry.gpu.uuid: entry for entry in self._gpus.topology(names)}
        except NvmlError as e:
            raise RealizeError(f"reading the device attributes for its metadata through NVML failed: {e}") from e
        driver_version, cuda_driver_version = self._versions
        attributes: dict[str, dict[str, DeviceAttribute]] = {}
        for device in record.devices:
            entry = topology.get(device.intent.gpu_uuid)
            if entry is None:
                attributes[device.intent.device_name] = {}
                continue
            gpu = dataclasses.replace(
                entry.gpu, pcie_root=pcie_root(normalise_pci_bus_id(entry.gpu.pci_bus_id), self._sysfs)
            )
            attributes[device.intent.device_name] = compute_published_attributes(
                self._driver_name, driver_version, cuda_driver_version, gpu, entry.profiles, device.intent.device_name
            )
        return attributes


# -- files ----------------------------------------------------------------------------------------


def write_claim_metadata(root: Path, files: Sequence[RequestMetadata], claim_uid: str) -> None:
    """Write (or atomically replace) each request's file; the claim's files of other requests go.

    Not fsynced, for the reason CDI specs are not (docs/prepare.md §5): the files describe instances
    of this boot.  The caller holds the claim's lock.
    """
    for request in files:
        _inside(root, request.host_path)
        data = encode_metadata_stream(request.metadata)
        try:
            _write(request.host_path, data)
        except FileNotFoundError:  # its empty directory was removed by a clean-up just now: make it again
            _write(request.host_path, data)
    if files:
        claim_dir = files[0].host_path.parent.parent
        kept = {request.host_path for request in files}
        _remove_files(claim_dir, lambda path, uid: path not in kept and uid in (claim_uid, None))


def read_metadata_missing(files: Sequence[RequestMetadata]) -> bool:
    """Whether a request's file is not on disk (a repeated prepare writes them again)."""
    return any(not request.host_path.is_file() for request in files)


def remove_claim_metadata(root: Path, namespace: str, name: str, claim_uid: str) -> int:
    """Remove the claim's files (those of another claim UID under the same name stay) and the empty
    directories; the number of files removed.  The caller holds the claim's lock."""
    if compute_metadata_path_problem(namespace, name, (), None) is not None:
        return 0  # nothing was ever written for such names
    claim_dir = root / METADATA_DIR / claim_directory_name(namespace, name)
    return _remove_files(claim_dir, lambda path, uid: uid in (claim_uid, None))


@dataclass(frozen=True, slots=True)
class ClaimMetadataDirectory:
    """A claim directory on disk and the claim UIDs its files belong to (None: a file no one can read)."""

    namespace: str
    name: str
    claim_uids: frozenset[str | None]


def list_metadata_claims(root: Path) -> list[ClaimMetadataDirectory]:
    """The claim directories under ``<root>/dra-device-metadata`` (names migdra does not write are ignored)."""
    base = root / METADATA_DIR
    try:
        entries = sorted(os.scandir(base), key=lambda entry: entry.name)
    except FileNotFoundError:
        return []
    found = []
    for entry in entries:
        parsed = parse_claim_directory_name(entry.name)
        if parsed is None or not entry.is_dir(follow_symlinks=False):
            continue
        uids = frozenset(_file_uid(path) for path in _metadata_files(Path(entry.path)))
        found.append(ClaimMetadataDirectory(parsed[0], parsed[1], uids))
    return found


def remove_metadata_directory(root: Path, namespace: str, name: str) -> int:
    """Remove every metadata file of a claim directory no record names, temporary files of writers that
    are gone, and the empty directories; the number of files removed.  The caller holds the lock of
    every claim UID the directory's files name."""
    claim_dir = root / METADATA_DIR / claim_directory_name(namespace, name)
    removed = _remove_files(claim_dir, lambda path, uid: True)
    for request_dir in _request_dirs(claim_dir):
        for entry in os.scandir(request_dir):
            parsed = parse_temporary_name(entry.name)
            if (
                parsed is not None
                and parsed[0] == METADATA_FILE
                and (parsed[1] == os.getpid() or process_is_gone(parsed[1]))
            ):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
        _remove_empty(request_dir)
    _remove_empty(claim_dir)
    return removed


def _write(path: Path, data: bytes) -> None:
    # chmod before the rename: the process umask must not hide the file from the workload's user.
    write_file_atomically(path, data, mode=FILE_MODE, before_replace=lambda tmp: os.chmod(tmp, FILE_MODE), sync=False)


def _inside(root: Path, path: Path) -> None:
    """Defence in depth: the names were checked, and the path must be below ``<root>/dra-device-metadata``."""
    base = os.path.normpath(root / METADATA_DIR)
    if os.path.commonpath([base, os.path.normpath(path)]) != base or os.path.normpath(path) == base:
        raise DeviceMetadataError(f"device metadata path {path} is outside {base}")


def _request_dirs(claim_dir: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(claim_dir) if e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _metadata_files(claim_dir: Path) -> list[Path]:
    return [path for d in _request_dirs(claim_dir) if (path := d / METADATA_FILE).is_file()]


def _file_uid(path: Path) -> str | None:
    try:
        return parse_metadata_claim_uid(path.read_bytes())
    except OSError:
        return None


def _remove_files(claim_dir: Path, remove: Callable[[Path, str | None], bool]) -> int:
    """Remove the metadata files ``remove(path, claim UID)`` accepts, then empty directories."""
    removed = 0
    for path in _metadata_files(claim_dir):
        if remove(path, _file_uid(path)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed += 1
    for request_dir in _request_dirs(claim_dir):
        _remove_empty(request_dir)
    _remove_empty(claim_dir)
    return removed


def _remove_empty(directory: Path) -> None:
    with contextlib.suppress(OSError):
        directory.rmdir()  # only an empty one: a file written meanwhile keeps it
