"""Extended resources backed by DRA (KEP-5004): DeviceClass name mapping, the special claim's requests
and metadata, finding it again, request mappings and the ``Insufficient`` case."""

from __future__ import annotations

from typing import Any

import pytest

from migdra_devcluster.scheduler.extended import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    IMPLICIT_PREFIX,
    device_class_mapping,
    extended_claim_requests,
    find_extended_claim,
    is_extended_resource_name,
    new_extended_claim,
    request_mappings,
    unmapped_extended_resources,
)

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-02T00:00:00Z"


def device_class(name: str, extended: str | None = None, created: str | None = T0) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if created is not None:
        metadata["creationTimestamp"] = created
    spec: dict[str, Any] = {"selectors": []}
    if extended is not None:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": metadata, "spec": spec}


def container(
    name: str, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "busybox", "resources": resources}


def make_pod(*containers: dict[str, Any], init: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init is not None:
        spec["initContainers"] = init
    return {"metadata": {"name": "train", "namespace": "ml", "uid": "uid-1"}, "spec": spec}


def make_node(allocatable: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1"},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", **(allocatable or {})}},
    }


def request(name: str, class_name: str, count: int) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": class_name, "allocationMode": "ExactCount", "count": count}}


GPU = "example.com/gpu"
MIG = "example.com/mig-1g"
MAPPING = {GPU: "gpu.example.com", MIG: "mig.example.com", IMPLICIT_PREFIX + "gpu.example.com": "gpu.example.com"}


# -- device_class_mapping ---------------------------------------------------------------------------


def test_mapping_has_explicit_and_implicit_names() -> None:
    classes = [device_class("gpu.example.com", GPU), device_class("plain")]
    assert device_class_mapping(classes) == {
        GPU: "gpu.example.com",
        IMPLICIT_PREFIX + "gpu.example.com": "gpu.example.com",
        IMPLICIT_PREFIX + "plain": "plain",
    }


def test_mapping_of_no_classes_is_empty() -> None:
    assert device_class_mapping([]) == {}


@pytest.mark.parametrize(
    ("classes", "winner"),
    [
        pytest.param([device_class("old", GPU, T0), device_class("new", GPU, T1)], "new", id="later-created-wins"),
        pytest.param([device_class("new", GPU, T1), device_class("old", GPU, T0)], "new", id="order-does-not-matter"),
        pytest.param([device_class("b", GPU, T0), device_class("a", GPU, T0)], "a", id="tie-first-name-wins"),
        pytest.param([device_class("a", GPU, T0), device_class("b", GPU, T0)], "a", id="tie-order-does-not-matter"),
        pytest.param(
            [device_class("a", GPU, T0), device_class("z", GPU, T1), device_class("m", GPU, T1)],
            "m",
            id="tie-among-the-newest",
        ),
        pytest.param(
            [device_class("a", GPU, "2026-01-01T01:00:00+01:00"), device_class("b", GPU, T0)],
            "a",
            id="same-instant-other-offset-is-a-tie",
        ),
        pytest.param(
            [device_class("a", GPU, "2026-01-01T00:00:01Z"), device_class("b", GPU, T0)], "a", id="one-second-later"
        ),
        pytest.param([device_class("a", GPU, None), device_class("b", GPU, T0)], "b", id="no-timestamp-is-oldest"),
    ],
)
def test_explicit_name_conflicts(classes: list[dict[str, Any]], winner: str) -> None:
    mapping = device_class_mapping(classes)
    assert mapping[GPU] == winner
    # Every class keeps its implicit name whether or not it won the explicit one.
    assert {IMPLICIT_PREFIX + str(c["metadata"]["name"]) for c in classes} <= set(mapping)


def test_empty_extended_resource_name_is_no_name() -> None:
    assert device_class_mapping([device_class("a", "")]) == {IMPLICIT_PREFIX + "a": "a"}


def test_class_without_name_is_skipped() -> None:
    assert device_class_mapping([{"metadata": {}, "spec": {"extendedResourceName": GPU}}]) == {}


# -- is_extended_resource_name ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("example.com/gpu", True, id="vendor-domain"),
        pytest.param("nvidia.com/mig-1g.10gb", True, id="dots-in-name"),
        pytest.param("a.b.example.com/Foo_Bar", True, id="mixed-case-name"),
        pytest.param(IMPLICIT_PREFIX + "gpu.example.com", True, id="implicit-deviceclass-name"),
        pytest.param("cpu", False, id="native-unprefixed"),
        pytest.param("memory", False, id="memory"),
        pytest.param("hugepages-2Mi", False, id="hugepages"),
        pytest.param("kubernetes.io/foo", False, id="kubernetes-io"),
        pytest.param("resource.kubernetes.io/foo", False, id="subdomain-of-kubernetes-io"),
        pytest.param("notkubernetes.io/foo", False, id="contains-kubernetes-io-slash"),
        pytest.param("requests.example.com/gpu", False, id="requests-prefix"),
        pytest.param("Example.com/gpu", False, id="uppercase-domain"),
        pytest.param("example.com/", False, id="empty-name"),
        pytest.param("/gpu", False, id="empty-domain"),
        pytest.param("example.com/a/b", False, id="two-slashes"),
        pytest.param("example.com/-gpu", False, id="name-starts-with-dash"),
        pytest.param("example.com/" + "g" * 63, True, id="name-63"),
        pytest.param("example.com/" + "g" * 64, False, id="name-64"),
        pytest.param("a" * 240 + ".com/gpu", True, id="domain-fits-after-requests-prefix"),
        pytest.param("a" * 241 + ".com/gpu", False, id="domain-too-long-after-requests-prefix"),
    ],
)
def test_is_extended_resource_name(name: str, expected: bool) -> None:
    assert is_extended_resource_name(name) is expected


# -- extended_claim_requests ------------------------------------------------------------------------


def test_one_container_one_resource() -> None:
    pod = make_pod(container("main", {GPU: "2"}))
    assert extended_claim_requests(pod, MAPPING, make_node()) == [
        request("container-0-request-0", "gpu.example.com", 2)
    ]


def test_request_index_counts_all_sorted_resource_names() -> None:
    # sorted: cpu, example.com/gpu, example.com/mig-1g, memory
    pod = make_pod(container("main", {"memory": "1Gi", MIG: "3", "cpu": "1", GPU: "1"}))
    assert extended_claim_requests(pod, MAPPING, make_node()) == [
        request("container-0-request-1", "gpu.example.com", 1),
        request("container-0-request-2", "mig.example.com", 3),
    ]


def test_init_containers_come_first_in_container_index() -> None:
    pod = make_pod(
        container("a", {GPU: "1"}),
        container("b", {"cpu": "1", GPU: "2"}),
        init=[container("setup", {GPU: "4"}), container("noop", {"cpu": "1"})],
    )
    assert extended_claim_requests(pod, MAPPING, make_node()) == [
        request("container-0-request-0", "gpu.example.com", 4),
        request("container-2-request-0", "gpu.example.com", 1),
        request("container-3-request-1", "gpu.example.com", 2),
    ]


def test_requests_sort_as_strings() -> None:
    containers = [container(f"c{i}", {GPU: str(i + 1)}) for i in range(11)]
    names = [r["name"] for r in extended_claim_requests(make_pod(*containers), MAPPING, make_node())]
    assert names == sorted(f"container-{i}-request-0" for i in range(11))
    assert names[:3] == ["container-0-request-0", "container-1-request-0", "container-10-request-0"]


@pytest.mark.parametrize(
    ("requests", "limits", "expected"),
    [
        pytest.param({GPU: "2"}, {GPU: "2"}, [request("container-0-request-0", "gpu.example.com", 2)], id="both"),
        pytest.param(None, {GPU: "3"}, [request("container-0-request-1", "gpu.example.com", 3)], id="limits-only"),
        pytest.param(
            {"cpu": "1"}, {GPU: "3"}, [request("container-0-request-1", "gpu.example.com", 3)], id="limit-fills-in"
        ),
        pytest.param(
            {GPU: "1"}, {GPU: "5"}, [request("container-0-request-0", "gpu.example.com", 1)], id="request-wins"
        ),
        pytest.param(
            {"memory": "1Gi"},
            {"cpu": "2", GPU: "1"},
            [request("container-0-request-1", "gpu.example.com", 1)],
            id="limit-names-count-in-index",
        ),
    ],
)
def test_requests_fall_back_to_limits(
    requests: dict[str, Any] | None, limits: dict[str, Any], expected: list[dict[str, Any]]
) -> None:
    base = {"cpu": "1"} if requests is None else requests
    pod = make_pod(container("main", base, limits))
    assert extended_claim_requests(pod, MAPPING, make_node()) == expected


@pytest.mark.parametrize(
    ("allocatable", "expected"),
    [
        pytest.param({}, [request("container-0-request-0", "gpu.example.com", 1)], id="node-lacks-it"),
        pytest.param({GPU: "0"}, [request("container-0-request-0", "gpu.example.com", 1)], id="node-has-zero"),
        pytest.param({GPU: "4"}, [], id="device-plugin-provides-it"),
        pytest.param({GPU: 4}, [], id="device-plugin-number"),
        pytest.param({GPU: "500m"}, [], id="fraction-counts-as-provided"),
        pytest.param({MIG: "4"}, [request("container-0-request-0", "gpu.example.com", 1)], id="other-resource"),
    ],
)
def test_device_plugin_resources_get_no_request(allocatable: dict[str, Any], expected: list[dict[str, Any]]) -> None:
    pod = make_pod(container("main", {GPU: "1"}))
    assert extended_claim_requests(pod, MAPPING, make_node(allocatable)) == expected


def test_device_plugin_resource_beside_dra_resource() -> None:
    pod = make_pod(container("main", {GPU: "1", MIG: "2"}))
    assert extended_claim_requests(pod, MAPPING, make_node({GPU: "8"})) == [
        request("container-0-request-1", "mig.example.com", 2)
    ]


@pytest.mark.parametrize(
    ("amount", "expected_count"),
    [
        pytest.param("0", None, id="zero"),
        pytest.param(0, None, id="zero-number"),
        pytest.param("0k", None, id="zero-with-suffix"),
        pytest.param("1500m", None, id="fraction-skipped"),
        pytest.param("2000m", 2, id="whole-millis-arrive-canonical"),
        pytest.param("1k", 1000, id="decimal-suffix"),
        pytest.param("1Ki", 1024, id="binary-suffix"),
        pytest.param("1e1", 10, id="exponent"),
        pytest.param("0.5", None, id="half"),
        pytest.param("100E", None, id="beyond-int64"),
        pytest.param(3, 3, id="json-number"),
        pytest.param(2.0, 2, id="whole-float-from-yaml"),
        pytest.param("not-a-quantity", None, id="garbage-skipped"),
    ],
)
def test_request_counts(amount: Any, expected_count: int | None) -> None:
    pod = make_pod(container("main", {GPU: amount}))
    expected = [] if expected_count is None else [request("container-0-request-0", "gpu.example.com", expected_count)]
    assert extended_claim_requests(pod, MAPPING, make_node()) == expected


def test_zero_in_one_container_does_not_hide_another() -> None:
    pod = make_pod(container("a", {GPU: "0"}), container("b", {GPU: "1"}))
    assert extended_claim_requests(pod, MAPPING, make_node()) == [
        request("container-1-request-0", "gpu.example.com", 1)
    ]


def test_implicit_name_request() -> None:
    name = IMPLICIT_PREFIX + "gpu.example.com"
    pod = make_pod(container("main", {"cpu": "1", name: "1"}))
    assert extended_claim_requests(pod, MAPPING, make_node()) == [
        request("container-0-request-1", "gpu.example.com", 1)
    ]


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(make_pod(container("main", {"cpu": "1", "memory": "1Gi"})), id="native-only"),
        pytest.param(make_pod(container("main", {"other.com/fpga": "1"})), id="unmapped-extended"),
        pytest.param(make_pod(container("main")), id="no-resources"),
        pytest.param({"metadata": {"name": "p"}}, id="no-spec"),
    ],
)
def test_no_requests_needed(pod: dict[str, Any]) -> None:
    assert extended_claim_requests(pod, MAPPING, make_node()) == []


def test_mapping_entries_for_native_names_are_ignored() -> None:
    pod = make_pod(container("main", {"cpu": "2"}))
    assert extended_claim_requests(pod, {"cpu": "cpu-class"}, make_node()) == []


# -- new_extended_claim -----------------------------------------------------------------------------


def test_new_claim_body() -> None:
    requests = [request("container-0-request-0", "gpu.example.com", 2)]
    assert new_extended_claim(make_pod(container("main", {GPU: "2"})), requests) == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": "train-extended-resources-",
            "namespace": "ml",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": "train",
                    "uid": "uid-1",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
        },
        "spec": {"devices": {"requests": [request("container-0-request-0", "gpu.example.com", 2)]}},
    }


def test_new_claim_does_not_share_the_callers_requests() -> None:
    requests = [request("container-0-request-0", "gpu.example.com", 2)]
    claim = new_extended_claim(make_pod(), requests)
    claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = 9
    assert requests[0]["exactly"]["count"] == 2


def test_annotation_constant() -> None:
    assert EXTENDED_RESOURCE_CLAIM_ANNOTATION == "resource.kubernetes.io/extended-resource-claim"
    assert IMPLICIT_PREFIX == "deviceclass.resource.kubernetes.io/"


# -- find_extended_claim ----------------------------------------------------------------------------


def claim_for(
    name: str,
    owner_name: str = "train",
    owner_uid: str = "uid-1",
    controller: Any = True,
    annotation: str | None = "true",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "ml",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": owner_name, "uid": owner_uid}],
    }
    if controller is not None:
        metadata["ownerReferences"][0]["controller"] = controller
    if annotation is not None:
        metadata["annotations"] = {EXTENDED_RESOURCE_CLAIM_ANNOTATION: annotation}
    return {"metadata": metadata, "spec": {"devices": {"requests": []}}}


@pytest.mark.parametrize(
    ("claim", "found"),
    [
        pytest.param(claim_for("c"), True, id="match"),
        pytest.param(claim_for("c", annotation=None), False, id="no-annotation"),
        pytest.param(claim_for("c", annotation="false"), False, id="annotation-false"),
        pytest.param(claim_for("c", annotation="True"), False, id="annotation-not-exactly-true"),
        pytest.param(claim_for("c", owner_uid="uid-0"), False, id="predecessor-pod-uid"),
        pytest.param(claim_for("c", owner_name="other"), False, id="other-pod-name"),
        pytest.param(claim_for("c", controller=False), False, id="owner-not-controller"),
        pytest.param(claim_for("c", controller=None), False, id="controller-unset"),
    ],
)
def test_find_extended_claim(claim: dict[str, Any], found: bool) -> None:
    assert (find_extended_claim(make_pod(), [claim]) is claim) is found


def test_find_picks_the_matching_claim_among_others() -> None:
    wanted = claim_for("mine")
    claims = [claim_for("a", owner_uid="uid-0"), {"metadata": {"name": "plain"}}, wanted]
    assert find_extended_claim(make_pod(), claims) is wanted


def test_find_looks_at_every_owner_reference() -> None:
    claim = claim_for("c")
    claim["metadata"]["ownerReferences"].insert(0, {"apiVersion": "v1", "kind": "Pod", "name": "x", "uid": "y"})
    assert find_extended_claim(make_pod(), [claim]) is claim


def test_find_nothing() -> None:
    assert find_extended_claim(make_pod(), []) is None


# -- request_mappings -------------------------------------------------------------------------------


def test_request_mappings_follow_the_claim() -> None:
    pod = make_pod(
        container("a", {"cpu": "1", GPU: "1", MIG: "2"}),
        container("b", None, {GPU: "1"}),
        init=[container("setup", {GPU: "4"})],
    )
    requests = extended_claim_requests(pod, MAPPING, make_node())
    claim = new_extended_claim(pod, requests)
    assert request_mappings(claim, pod) == [
        {"containerName": "setup", "resourceName": GPU, "requestName": "container-0-request-0"},
        {"containerName": "a", "resourceName": GPU, "requestName": "container-1-request-1"},
        {"containerName": "a", "resourceName": MIG, "requestName": "container-1-request-2"},
        {"containerName": "b", "resourceName": GPU, "requestName": "container-2-request-0"},
    ]


def test_request_mappings_leave_out_device_plugin_resources() -> None:
    pod = make_pod(container("a", {GPU: "1", MIG: "1"}))
    claim = new_extended_claim(pod, extended_claim_requests(pod, MAPPING, make_node({GPU: "8"})))
    assert request_mappings(claim, pod) == [
        {"containerName": "a", "resourceName": MIG, "requestName": "container-0-request-1"}
    ]


def test_request_mappings_ignore_unknown_request_names() -> None:
    pod = make_pod(container("a", {GPU: "1"}))
    claim = new_extended_claim(pod, [request("container-5-request-0", "x", 1), request("other", "x", 1)])
    assert request_mappings(claim, pod) == []


# -- unmapped_extended_resources --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "allocatable", "expected"),
    [
        pytest.param(make_pod(container("a", {"other.com/fpga": "1"})), {}, ["other.com/fpga"], id="unmapped"),
        pytest.param(make_pod(container("a", {"other.com/fpga": "1"})), {"other.com/fpga": "2"}, [], id="node-has-it"),
        pytest.param(
            make_pod(container("a", {"other.com/fpga": "1"})), {"other.com/fpga": "0"}, ["other.com/fpga"], id="zero"
        ),
        pytest.param(make_pod(container("a", {GPU: "1"})), {}, [], id="mapped-to-class"),
        pytest.param(make_pod(container("a", {"other.com/fpga": "0"})), {}, [], id="zero-request"),
        pytest.param(make_pod(container("a", {"other.com/fpga": "250m"})), {}, ["other.com/fpga"], id="fraction"),
        pytest.param(make_pod(container("a", {"cpu": "64", "memory": "1Ti"})), {}, [], id="native-not-listed"),
        pytest.param(make_pod(container("a", None, {"other.com/fpga": "1"})), {}, ["other.com/fpga"], id="limits-only"),
        pytest.param(
            make_pod(container("a", {"z.com/x": "1"}), init=[container("i", {"b.com/y": "1", GPU: "1"})]),
            {},
            ["b.com/y", "z.com/x"],
            id="init-containers-sorted",
        ),
        pytest.param(
            make_pod(container("a", {"other.com/fpga": "1"}), container("b", {"other.com/fpga": "1"})),
            {},
            ["other.com/fpga"],
            id="listed-once",
        ),
        pytest.param(
            make_pod(container("a", {IMPLICIT_PREFIX + "gone": "1"})),
            {},
            [IMPLICIT_PREFIX + "gone"],
            id="implicit-name-of-missing-class",
        ),
    ],
)
def test_unmapped_extended_resources(pod: dict[str, Any], allocatable: dict[str, Any], expected: list[str]) -> None:
    assert unmapped_extended_resources(pod, MAPPING, make_node(allocatable)) == expected
