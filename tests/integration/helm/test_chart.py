"""The Helm chart, linted and rendered by the real helm: every values file of helm/migdra/ci, the schema's
refusals, the DeviceClasses from deviceclasses/ (single source), and what the plugin's pod must have
to work at all (the settings it is given exist, kubelet's paths are the host's, the probes reach it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic_settings import BaseSettings

import dra_driver.cli.main  # noqa: F401  (imports every settings group the commands read)
from dra_driver.controller.settings import ControllerSettings
from dra_driver.device_config import load_device_model_config
from dra_driver.deviceclasses import DEVICECLASS_DIR, deviceclass_documents
from dra_driver.logs import LogSettings
from dra_driver.nvml.settings import NvmlSettings
from kubeletplugin.settings import PluginSettings, PrepareSettings
from tests.integration.helm.chart import CHART, NAMESPACE, VALUES_FILES, container_env, helm, render, values_args

ALL_VALUES = [None, *VALUES_FILES]
VALUES_IDS = ["default", *(path.stem for path in VALUES_FILES)]


@pytest.mark.parametrize("values_file", ALL_VALUES, ids=VALUES_IDS)
def test_helm_lint_is_clean_for_every_values_file(values_file: Path | None) -> None:
    result = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, *values_args(values_file))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_the_ci_values_files_cover_the_modes() -> None:
    names = {path.stem for path in VALUES_FILES}
    assert {"simulated-values", "gpu-operator-values", "restricted-values", "monitoring-values"} <= names


def test_the_chart_refuses_kubernetes_older_than_1_35() -> None:
    old = helm("template", "migdra", str(CHART), "--kube-version", "1.34.4", check=False)
    assert old.returncode != 0
    assert "kubeVersion" in old.stderr or ">=1.35.0-0" in old.stderr
    helm("template", "migdra", str(CHART), "--kube-version", "1.35.0")


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        (["driverName=Not_A_DNS_Name"], "driverName"),
        (["placementPolicy=best-fit"], "placementPolicy"),
        (["logFormat=xml"], "logFormat"),
        (["logVerbosity=3"], "logVerbosity"),
        (["kubeletPlugin.healthcheckPort=0"], "healthcheckPort"),
        (["kubeletPlugin.metrics.port=70000"], "port"),
        (["image.digest=sha256:abc"], "digest"),
        (["image.pullPolicy=Sometimes"], "pullPolicy"),
        (["driver.root=run/nvidia/driver"], "root"),
        (["kubeletDir=var/lib/kubelet"], "kubeletDir"),
        (["simulated.gpus=H100-SXM5-80GB:0"], "gpus"),
        (["excludeGpus[0]=MIG-4f3e9a2c-1111-2222-3333-444455556666"], "excludeGpus"),
        (["profiles.H100-SXM5-80GB.alow[0]=1g.10gb"], "alow"),
        (["kubeletPlugin.deviceTaints.clearAfter=-1"], "clearAfter"),
        (["controller.leaderElection=false", "controller.replicas=2"], "replicas"),
        (["unknownKey=1"], "unknownKey"),
        (["kubeletPlugin.updateStrategy.type=Recreate"], "type"),
    ],
    ids=lambda value: value[0] if isinstance(value, list) else value,
)
def test_the_values_schema_refuses_bad_values_naming_them(sets: list[str], named: str) -> None:
    result = helm("template", "migdra", str(CHART), *values_args(None, sets), check=False)
    assert result.returncode != 0, f"helm accepted {sets}"
    assert "values don't meet the specifications of the schema" in result.stderr
    assert named in result.stderr, result.stderr


def test_the_values_schema_describes_every_default() -> None:
    """A key in values.yaml without a schema entry would be refused by additionalProperties: false."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    helm("lint", "--strict", str(CHART))  # the defaults themselves pass the schema


@pytest.mark.parametrize("driver", ["gpu.migdra.io", "gpu.example.com"])
@pytest.mark.parametrize("examples", [False, True])
def test_the_chart_renders_the_deviceclasses_of_the_single_source(driver: str, examples: bool) -> None:
    rendered = render(sets=[f"driverName={driver}", f"deviceClasses.examples={str(examples).lower()}"])
    classes = {obj["metadata"]["name"]: obj for obj in rendered.of_kind("DeviceClass")}
    expected = {
        doc["metadata"]["name"]: doc
        for doc in deviceclass_documents(DEVICECLASS_DIR, driver)
        if examples or (DEVICECLASS_DIR / f"{doc['metadata']['name']}.yaml").exists()
    }
    assert sorted(classes) == sorted(expected)
    assert {"mig.migdra.io", "gpu.migdra.io"} <= set(classes)  # the class names never follow the driver name
    for name, document in expected.items():
        assert classes[name]["spec"] == document["spec"], name
        assert classes[name]["metadata"]["labels"]["app.kubernetes.io/instance"] == "migdra"


def test_no_deviceclasses_when_asked_not_to() -> None:
    assert render(sets=["deviceClasses.create=false"]).of_kind("DeviceClass") == []


def _settings_env_names() -> set[str]:
    """Every MIGDRA_* variable some settings group of migdra reads."""
    groups: set[type[BaseSettings]] = {PluginSettings, PrepareSettings, NvmlSettings, ControllerSettings, LogSettings}
    pending = list(BaseSettings.__subclasses__())
    while pending:  # and any other group imported by now (named above too: the test must not depend on what ran before)
        group = pending.pop()
        pending.extend(group.__subclasses__())
        if group.__module__.startswith(("dra_driver.", "kubeletplugin.")):
            groups.add(group)
    names = set()
    for group in groups:
        prefix = str(group.model_config.get("env_prefix", ""))
        names |= {f"{prefix}{field}".upper() for field in group.model_fields}
    return names


@pytest.mark.parametrize("values_file", ALL_VALUES, ids=VALUES_IDS)
def test_every_variable_the_chart_sets_is_a_setting_of_migdra(values_file: Path | None) -> None:
    known = _settings_env_names()
    rendered = render(values_file)
    workloads = [(rendered.one("DaemonSet"), "kubelet-plugin")]
    workloads += [(deployment, "controller") for deployment in rendered.of_kind("Deployment")]
    for workload, container in workloads:
        env = container_env(workload, container)
        unknown = sorted(name for name in env if name.startswith("MIGDRA_") and name not in known)
        assert unknown == [], f"{container} is given variables no migdra setting reads: {unknown}"
        assert set(env) - known <= {"LD_LIBRARY_PATH"}


def _plugin_pod(values_file: Path | None = None, sets: tuple[str, ...] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    daemonset = render(values_file, sets).one("DaemonSet")
    return daemonset, container_env(daemonset, "kubelet-plugin")


@pytest.mark.parametrize("values_file", ALL_VALUES, ids=VALUES_IDS)
def test_kubelet_paths_are_mounted_where_the_host_has_them(values_file: Path | None) -> None:
    """kubelet dials the socket path the plugin registers, and the runtime reads CDI specs and metadata
    mounts by host path: each directory must appear in the container at its host path."""
    daemonset, env = _plugin_pod(values_file)
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    host_paths = {volume["name"]: volume["hostPath"]["path"] for volume in pod["volumes"] if "hostPath" in volume}
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    for name in ("plugins-registry", "plugin-dir", "cdi"):
        assert mounts[name] == host_paths[name], name
    assert env["MIGDRA_REGISTRY_DIR"] == host_paths["plugins-registry"]
    assert env["MIGDRA_REGISTRY_DIR"].endswith("/plugins_registry")
    driver_name = env["MIGDRA_DRIVER_NAME"]
    for name in ("MIGDRA_PLUGIN_DIR", "MIGDRA_STATE_DIR", "MIGDRA_PLUGIN_DATA_DIR"):
        assert env[name] == host_paths["plugin-dir"], name
    assert host_paths["plugin-dir"].endswith(f"/plugins/{driver_name}")
    assert env["MIGDRA_CDI_DIR"] == host_paths["cdi"]
    if env["MIGDRA_NVML"] == "real":
        assert mounts["driver-root"] == env["MIGDRA_DRIVER_ROOT"]
        assert host_paths["driver-root"] == env["MIGDRA_HOST_DRIVER_ROOT"]
    else:
        assert "driver-root" not in mounts
        assert env["MIGDRA_SIM_STATE"].startswith(host_paths["plugin-dir"] + "/")  # survives a pod restart
        assert env["MIGDRA_CDI_DEVICE_NODES"] == env["MIGDRA_CDI_DRIVER_FILES"] == "false"


@pytest.mark.parametrize("values_file", ALL_VALUES, ids=VALUES_IDS)
def test_the_plugin_pod_is_node_critical_probed_and_updated_side_by_side(values_file: Path | None) -> None:
    daemonset, env = _plugin_pod(values_file)
    pod = daemonset["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert pod["spec"]["priorityClassName"] == "system-node-critical"
    assert daemonset["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    # health: the probes reach the port the plugin serves its gRPC health service on
    port = int(env["MIGDRA_HEALTHCHECK_ADDRESS"].rpartition(":")[2])
    assert container["livenessProbe"]["grpc"]["port"] == port
    assert container["startupProbe"]["grpc"]["port"] == port
    assert "hostNetwork" not in pod["spec"]  # two pods of an update would fight over host ports
    # a surge update needs sockets named by pod UID, from the downward API
    strategy = daemonset["spec"]["updateStrategy"]
    assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert env["MIGDRA_POD_UID"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    assert env["MIGDRA_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    # the pod outlives the plugin's own shutdown grace
    assert pod["spec"]["terminationGracePeriodSeconds"] > int(env["MIGDRA_SHUTDOWN_GRACE"])
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security.get("privileged", False) is (env["MIGDRA_NVML"] == "real")


def test_a_changed_device_configuration_rolls_the_plugin_pods() -> None:
    before, _ = _plugin_pod()
    after, _ = _plugin_pod(sets=("profiles.H100-SXM5-80GB.deny[0]=*+me*",))
    key = "checksum/device-config"
    assert (
        before["spec"]["template"]["metadata"]["annotations"][key]
        != (after["spec"]["template"]["metadata"]["annotations"][key])
    )


def test_the_device_configuration_reaches_the_plugin_as_its_file_format(tmp_path: Path) -> None:
    config_map = render(CHART / "ci" / "restricted-values.yaml").one("ConfigMap", "-kubelet-plugin")
    path = tmp_path / "device-config.yaml"
    path.write_text(config_map["data"]["device-config.yaml"])
    config = load_device_model_config(path, driver_name="mig.example.com")
    assert config.profiles["H100-SXM5-80GB"].allow == ("1g.10gb", "3g.40gb", "7g.80gb")
    assert config.profiles["*"].deny == ("*+me*",)
    assert config.exclude_gpus == ("0000:1b:00.0",)


@pytest.mark.parametrize(("sets", "shared"), [((), False), (("sharedDevices=true",), True)])
def test_shared_devices_are_published_only_where_the_values_enable_them(
    tmp_path: Path, sets: tuple[str, ...], shared: bool
) -> None:
    """Off by default (they cost kube-scheduler CPU per pod on large clusters); ``sharedDevices=true``
    reaches the plugin's device configuration."""
    config_map = render(sets=sets).one("ConfigMap", "-kubelet-plugin")
    path = tmp_path / "device-config.yaml"
    path.write_text(config_map["data"]["device-config.yaml"])
    assert load_device_model_config(path, driver_name="gpu.migdra.io").shared_devices is shared


def test_the_controller_runs_two_replicas_with_leader_election_by_default() -> None:
    deployment = render().one("Deployment", "-controller")
    env = container_env(deployment, "controller")
    assert deployment["spec"]["replicas"] == 2
    assert env["MIGDRA_CONTROLLER_LEADER_ELECT"] == "true"
    assert env["MIGDRA_CONTROLLER_LEASE_NAMESPACE"] == NAMESPACE
    assert env["MIGDRA_CONTROLLER_IDENTITY"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_optional_objects_appear_only_when_asked_for() -> None:
    default = render()
    assert not default.of_kind("ServiceMonitor")
    assert not default.of_kind("NetworkPolicy")
    monitoring = render(CHART / "ci" / "monitoring-values.yaml")
    assert len(monitoring.of_kind("ServiceMonitor")) == 2
    for monitor in monitoring.of_kind("ServiceMonitor"):
        (endpoint,) = monitor["spec"]["endpoints"]
        # the info series' namespace is the claim's (docs/metrics.md), and the dashboard filters by node
        assert endpoint["honorLabels"] is True
        assert endpoint["relabelings"] == [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}]
    assert len(monitoring.of_kind("NetworkPolicy")) == 2
    dashboard = monitoring.one("ConfigMap", "-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["migdra.json"])["panels"]
    without_controller = render(CHART / "ci" / "restricted-values.yaml")
    assert not without_controller.of_kind("Deployment")
    assert all("controller" not in obj["metadata"]["name"] for obj in without_controller.objects)
