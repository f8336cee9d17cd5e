"""KEP-5304 device metadata: paths, the file's stream format, CDI mounts, attributes, path safety."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dra_driver.devicemodel.config import DeviceModelConfig
from dra_driver.devicemodel.examples import example_inventory
from dra_driver.devicemodel.pool import build_pool
from dra_driver.mig.catalog import Placement
from kubeletplugin.prepare.cdi import CdiDevice, DeviceNode, build_cdi_spec
from kubeletplugin.prepare.errors import DeviceMetadataError
from kubeletplugin.prepare.metadata import (
    DeviceAttribute,
    RequestMetadata,
    build_claim_metadata,
    build_metadata_mounts,
    compute_container_path,
    compute_metadata_path_problem,
    compute_published_attributes,
    encode_metadata_stream,
    list_metadata_claims,
    parse_claim_directory_name,
    parse_metadata_claim_uid,
    parse_metadata_stream,
    remove_claim_metadata,
    remove_metadata_directory,
    write_claim_metadata,
)
from kubeletplugin.prepare.records import ClaimRecord, ClaimState, DeviceIntent, DeviceRecord

DRIVER = "gpu.migdra.io"
POOL = "node-a"
UID = "0c4f1a2e-1111-2222-3333-444455556666"
MIG = "gpu-0-mig-1g10gb-19-6"
MIG_UUID = "MIG-11111111-2222-3333-4444-555555555555"


def _device(name: str = MIG, requests: tuple[str, ...] = ("gpu",), *, realized: bool = True) -> DeviceRecord:
    mig = name.startswith("gpu-0-mig")
    intent = DeviceIntent(
        device_name=name,
        request_names=requests,
        gpu_uuid="GPU-aaaa",
        gpu_minor=0,
        profile_id=19 if mig else None,
        profile_name="1g.10gb" if mig else None,
        placement=Placement(start=6, size=1) if mig else None,
    )
    if not (mig and realized):
        return DeviceRecord(intent=intent)
    return DeviceRecord(intent=intent, gpu_instance_id=13, compute_instance_id=0, mig_uuid=MIG_UUID)


def _record(
    *devices: DeviceRecord, name: str = "train", namespace: str = "default", pod_claim_name: str | None = None
) -> ClaimRecord:
    return ClaimRecord(
        claim_uid=UID,
        namespace=namespace,
        name=name,
        pod_claim_name=pod_claim_name,
        state=ClaimState.PREPARE_COMPLETED,
        devices=devices or (_device(),),
    )


@pytest.mark.parametrize(
    ("claim", "pod_claim_name", "request_name", "expected"),
    [
        pytest.param(
            "train",
            None,
            "gpu",
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/train/gpu/gpu.migdra.io-metadata.json",
            id="direct-claim",
        ),
        pytest.param(
            "pod0-gpu-2kqrd",
            "gpu",
            "gpu",
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/gpu/gpu.migdra.io-metadata.json",
            id="claim-from-template-uses-the-pod-claim-name",
        ),
        pytest.param(
            "train",
            None,
            "gpu/high-memory",
            "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/train/gpu/gpu.migdra.io-metadata.json",
            id="subrequest-uses-the-top-level-request",
        ),
    ],
)
def test_the_container_path_is_the_one_kep_5304_defines(
    claim: str, pod_claim_name: str | None, request_name: str, expected: str
) -> None:
    assert compute_container_path(DRIVER, claim, pod_claim_name, request_name) == expected


@pytest.mark.parametrize(
    ("namespace", "name", "requests", "pod_claim_name", "problem"),
    [
        pytest.param("default", "train", ("gpu", "gpu/big"), "my-gpu", None, id="valid"),
        pytest.param("default", "a.b-c", ("gpu",), None, None, id="claim-name-is-a-subdomain"),
        pytest.param("../etc", "train", ("gpu",), None, "namespace", id="namespace-dot-dot"),
        pytest.param("de/fault", "train", ("gpu",), None, "namespace", id="namespace-slash"),
        pytest.param("a_b", "train", ("gpu",), None, "namespace", id="namespace-underscore"),
        pytest.param("default", "a/b", ("gpu",), None, "claim name", id="claim-name-slash"),
        pytest.param("default", "..", ("gpu",), None, "claim name", id="claim-name-dot-dot"),
        pytest.param("default", "", ("gpu",), None, "claim name", id="claim-name-empty"),
        pytest.param("default", "train", ("..",), None, "request", id="request-dot-dot"),
        pytest.param("default", "train", ("a/b/c",), None, "request", id="request-two-slashes"),
        pytest.param("default", "train", ("GPU",), None, "request", id="request-upper-case"),
        pytest.param("default", "train", ("gpu/../x",), None, "request", id="subrequest-escapes"),
        pytest.param("default", "train", ("",), None, "request", id="request-empty"),
        pytest.param("default", "train", ("gpu",), "../../x", "pod claim name", id="pod-claim-name-escapes"),
    ],
)
def test_names_that_could_leave_the_metadata_directory_are_refused(
    namespace: str, name: str, requests: tuple[str, ...], pod_claim_name: str | None, problem: str | None
) -> None:
    found = compute_metadata_path_problem(namespace, name, requests, pod_claim_name)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert found.startswith(problem)


def test_a_bad_request_name_writes_nothing_anywhere(tmp_path: Path) -> None:
    root = tmp_path / "plugin"
    record = _record(_device(requests=("../../../escape",)))
    with pytest.raises(DeviceMetadataError, match="request"):
        build_claim_metadata(record, DRIVER, POOL, root, {})
    with pytest.raises(DeviceMetadataError, match="request"):
        build_metadata_mounts(record, DRIVER, root)
    assert list(tmp_path.rglob("*")) == []


def test_a_file_outside_the_metadata_directory_is_never_written(tmp_path: Path) -> None:
    root = tmp_path / "plugin"
    (good,) = build_claim_metadata(_record(), DRIVER, POOL, root, {})
    outside = RequestMetadata("gpu", tmp_path / "elsewhere" / "metadata.json", good.container_path, good.metadata)
    with pytest.raises(DeviceMetadataError, match="outside"):
        write_claim_metadata(root, [outside], UID)
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize(
    ("directory", "expected"),
    [
        pytest.param("default_train", ("default", "train"), id="plain"),
        pytest.param("kube-system_a.b", ("kube-system", "a.b"), id="dotted-claim"),
        pytest.param("default", None, id="no-separator"),
        pytest.param("_train", None, id="no-namespace"),
        pytest.param("default_..", None, id="dot-dot"),
        pytest.param(".default_train.1.abcdef01.tmp", None, id="not-ours"),
    ],
)
def test_claim_directory_names_parse_back(directory: str, expected: tuple[str, str] | None) -> None:
    assert parse_claim_directory_name(directory) == expected


def test_the_file_is_a_stream_of_v1beta1_then_v1alpha1_in_the_upstream_layout(tmp_path: Path) -> None:
    published = {MIG: {"profile": DeviceAttribute(string="1g.10gb"), "placementStart": DeviceAttribute(int_value=6)}}
    (request,) = build_claim_metadata(_record(), DRIVER, POOL, tmp_path, published)
    assert request.host_path == tmp_path / "dra-device-metadata" / "default_train" / "gpu" / "metadata.json"
    data = encode_metadata_stream(request.metadata)

    text = data.decode()
    decoder = json.JSONDecoder()
    first, end = decoder.raw_decode(text)
    second, _ = decoder.raw_decode(text, end + 1)
    assert [first["apiVersion"], second["apiVersion"]] == [
        "metadata.resource.k8s.io/v1beta1",
        "metadata.resource.k8s.io/v1alpha1",
    ]
    assert {**first, "apiVersion": None} == {**second, "apiVersion": None}
    assert list(first) == ["kind", "apiVersion", "metadata", "requests"]  # no podClaimName for a direct claim
    assert first["kind"] == "DeviceMetadata"
    assert first["metadata"] == {"name": "train", "namespace": "default", "uid": UID, "generation": 1}
    (entry,) = first["requests"]
    assert entry["name"] == "gpu"
    (device,) = entry["devices"]
    assert list(device) == ["driver", "pool", "name", "attributes"]
    assert device["driver"] == DRIVER
    assert device["pool"] == POOL
    assert device["name"] == MIG
    assert device["attributes"] == {
        "computeInstanceID": {"int": 0},
        "gpuInstanceID": {"int": 13},
        "migUUID": {"string": MIG_UUID},
        "placementStart": {"int": 6},
        "profile": {"string": "1g.10gb"},
    }
    assert text.endswith("}\n")
    assert text.count("\n}\n") == 2
    assert parse_metadata_claim_uid(data) == UID
    assert [m.api_version for m in parse_metadata_stream(data)] == [
        "metadata.resource.k8s.io/v1beta1",
        "metadata.resource.k8s.io/v1alpha1",
    ]


def test_a_claim_from_a_template_records_its_pod_claim_name() -> None:
    (request,) = build_claim_metadata(
        _record(name="pod0-gpu-2kqrd", pod_claim_name="my-gpu"), DRIVER, POOL, Path("/p"), {}
    )
    assert request.metadata.pod_claim_name == "my-gpu"
    assert request.container_path.endswith("/resourceclaimtemplates/my-gpu/gpu/gpu.migdra.io-metadata.json")
    assert request.host_path == Path("/p/dra-device-metadata/default_pod0-gpu-2kqrd/gpu/metadata.json")
    document = json.loads(encode_metadata_stream(request.metadata).decode().split("\n}\n")[0] + "\n}")
    assert document["podClaimName"] == "my-gpu"


def test_requests_get_a_file_each_and_a_shared_device_is_in_both() -> None:
    shared = _device(MIG, ("train", "eval/small"))
    whole = _device("gpu-1", ("train",))
    files = build_claim_metadata(_record(shared, whole), DRIVER, POOL, Path("/p"), {})
    by_request = {f.request: f for f in files}
    assert list(by_request) == ["train", "eval"]
    train = by_request["train"].metadata.requests
    assert [(r.name, [d.name for d in r.devices]) for r in train] == [("train", [MIG, "gpu-1"])]
    (evaluation,) = by_request["eval"].metadata.requests
    assert evaluation.name == "eval/small"  # the full reference, the top-level name is the directory
    assert by_request["eval"].host_path.parent.name == "eval"
    (whole_gpu,) = [d for d in train[0].devices if d.name == "gpu-1"]
    assert whole_gpu.attributes is None  # no published attributes given, no instance: nothing to say


def test_every_device_of_a_request_mounts_that_requests_file_read_only() -> None:
    shared = _device(MIG, ("train", "eval"))
    whole = _device("gpu-1", ("train",))
    mounts = build_metadata_mounts(_record(shared, whole, pod_claim_name="pod-gpu"), DRIVER, Path("/p"))
    base = "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/pod-gpu"
    assert mounts == {
        MIG: [
            {
                "hostPath": "/p/dra-device-metadata/default_train/train/metadata.json",
                "containerPath": f"{base}/train/gpu.migdra.io-metadata.json",
                "options": ["ro", "bind"],
            },
            {
                "hostPath": "/p/dra-device-metadata/default_train/eval/metadata.json",
                "containerPath": f"{base}/eval/gpu.migdra.io-metadata.json",
                "options": ["ro", "bind"],
            },
        ],
        "gpu-1": [
            {
                "hostPath": "/p/dra-device-metadata/default_train/train/metadata.json",
                "containerPath": f"{base}/train/gpu.migdra.io-metadata.json",
                "options": ["ro", "bind"],
            }
        ],
    }


def test_the_cdi_spec_carries_the_mounts_of_exactly_the_devices_given() -> None:
    devices = [CdiDevice(MIG, (DeviceNode("/dev/nvidia0"),)), CdiDevice("gpu-1", (DeviceNode("/dev/nvidia1"),))]
    mount = {"hostPath": "/h", "containerPath": "/c", "options": ["ro", "bind"]}
    spec = build_cdi_spec(DRIVER, UID, devices, [], {MIG: [mount]})
    assert spec["devices"][0]["containerEdits"]["mounts"] == [mount]
    assert "mounts" not in spec["devices"][1]["containerEdits"]
    assert build_cdi_spec(DRIVER, UID, devices, []) == build_cdi_spec(DRIVER, UID, devices, [], {})


@pytest.mark.parametrize(
    "device_name",
    [
        pytest.param("gpu-0-mig-1g10gb-19-6", id="mig-device"),
        pytest.param("gpu-1-mig-3g40gb-9-4", id="mig-device-second-gpu"),
    ],
)
def test_the_attributes_are_the_ones_the_publisher_publishes(device_name: str) -> None:
    inventory = example_inventory(["H100-SXM5-80GB", "H100-SXM5-80GB"])
    published = build_pool(inventory, DeviceModelConfig(driver_name=DRIVER))
    (expected,) = [d.to_api()["attributes"] for d in published.devices if d.name == device_name]
    minor = int(device_name.split("-")[1])
    entry = inventory.gpus[minor]
    found = compute_published_attributes(
        DRIVER, inventory.driver_version, inventory.cuda_driver_version, entry.gpu, entry.profiles, device_name
    )
    assert {k: v.model_dump(by_alias=True, exclude_none=True) for k, v in found.items()} == expected


def test_the_attributes_of_a_whole_gpu_are_the_ones_the_publisher_publishes() -> None:
    inventory = example_inventory(["A100-SXM4-40GB"], mig_enabled=False)
    (expected,) = [d.to_api()["attributes"] for d in build_pool(inventory, DeviceModelConfig()).devices]
    entry = inventory.gpus[0]
    found = compute_published_attributes(DRIVER, "580.65.06", "13.0", entry.gpu, entry.profiles, "gpu-0")
    assert {k: v.model_dump(by_alias=True, exclude_none=True) for k, v in found.items()} == expected
    assert compute_published_attributes(DRIVER, "580.65.06", "13.0", entry.gpu, entry.profiles, "gpu-9") == {}


def test_writing_again_is_byte_identical_and_drops_requests_the_claim_no_longer_has(tmp_path: Path) -> None:
    two = build_claim_metadata(_record(_device(MIG, ("a", "b"))), DRIVER, POOL, tmp_path, {})
    write_claim_metadata(tmp_path, two, UID)
    first = {f.host_path: f.host_path.read_bytes() for f in two}
    write_claim_metadata(tmp_path, two, UID)
    assert {f.host_path: f.host_path.read_bytes() for f in two} == first
    assert all(oct(f.host_path.stat().st_mode & 0o777) == "0o644" for f in two)

    one = build_claim_metadata(_record(_device(MIG, ("a",))), DRIVER, POOL, tmp_path, {})
    write_claim_metadata(tmp_path, one, UID)
    assert not (tmp_path / "dra-device-metadata" / "default_train" / "b").exists()
    assert one[0].host_path.read_bytes() == first[one[0].host_path]


def test_removal_takes_the_claims_files_and_empty_directories_but_not_another_uids(tmp_path: Path) -> None:
    files = build_claim_metadata(_record(_device(MIG, ("a", "b"))), DRIVER, POOL, tmp_path, {})
    write_claim_metadata(tmp_path, files, UID)
    other = ClaimRecord(
        claim_uid="other-uid",
        namespace="default",
        name="train",
        state=ClaimState.PREPARE_COMPLETED,
        devices=(_device(MIG, ("c",)),),
    )
    write_claim_metadata(tmp_path, build_claim_metadata(other, DRIVER, POOL, tmp_path, {}), "other-uid")
    claim_dir = tmp_path / "dra-device-metadata" / "default_train"

    assert remove_claim_metadata(tmp_path, "default", "train", UID) == 2
    assert sorted(p.name for p in claim_dir.iterdir()) == ["c"]  # the re-created claim's file stays
    assert remove_claim_metadata(tmp_path, "default", "train", "other-uid") == 1
    assert not claim_dir.exists()
    assert (tmp_path / "dra-device-metadata").is_dir()
    assert remove_claim_metadata(tmp_path, "default", "train", UID) == 0  # idempotent
    assert remove_claim_metadata(tmp_path, "..", "..", UID) == 0  # such names never had files


def test_listing_names_each_claim_directory_with_the_uids_of_its_files(tmp_path: Path) -> None:
    write_claim_metadata(tmp_path, build_claim_metadata(_record(), DRIVER, POOL, tmp_path, {}), UID)
    garbage = tmp_path / "dra-device-metadata" / "default_old" / "gpu"
    garbage.mkdir(parents=True)
    (garbage / "metadata.json").write_text("not json")
    (garbage / ".metadata.json.999999999.0123abcd.tmp").write_text("{")  # a writer long gone
    (tmp_path / "dra-device-metadata" / "someone-elses").mkdir()

    listed = {(d.namespace, d.name): d.claim_uids for d in list_metadata_claims(tmp_path)}
    assert listed == {("default", "train"): frozenset({UID}), ("default", "old"): frozenset({None})}

    assert remove_metadata_directory(tmp_path, "default", "old") == 1
    assert not (tmp_path / "dra-device-metadata" / "default_old").exists()
    assert (tmp_path / "dra-device-metadata" / "someone-elses").is_dir()  # never ours to remove
