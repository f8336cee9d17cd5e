"""The chart's opaque-configuration policy, enforced by the real kube-apiserver: a mistake in a claim's,
a template's or a DeviceClass's parameters for migdra is refused at apply, every mistake at once with
its field path -- and it refuses exactly what the node plugin's parser refuses, in the plugin's words.

The differential: each case's parameters go to the plugin's own parser
(:func:`kubeletplugin.prepare.config.parse_opaque_parameters`) and, in a ResourceClaim, to kube-apiserver
with the rendered policy; both must accept, or both refuse naming the same problems in the same words.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from dra_driver.kube.client import CLAIM_TEMPLATES, CLAIMS, DEVICE_CLASSES, Client
from kubeletplugin.prepare.claims import DriverConfigEntry
from kubeletplugin.prepare.config import compute_config_problems
from tests.integration.helm.chart import render
from tests.kube_apiserver import KubeApiServer, kube_apiserver, require_kube_binaries
from tests.waiting import wait_for

DRIVER = "gpu.migdra.io"
VERSION = f"{DRIVER}/v1alpha1"
KUBECTL = Path(sys.executable).with_name("kubectl")
FOREIGN = {"opaque": {"driver": "net.example.com", "parameters": {"anything": ["goes", 1]}}}  # not ours: left alone


def config(**parameters: Any) -> dict[str, Any]:
    return {"opaque": {"driver": DRIVER, "parameters": parameters}}


CASES: dict[str, dict[str, Any]] = {
    "valid": {"apiVersion": VERSION, "kind": "MigDeviceConfig", "env": {"NCCL_DEBUG": "INFO"}},
    "valid-without-env": {"apiVersion": VERSION, "kind": "MigDeviceConfig"},
    "no-api-version": {"kind": "MigDeviceConfig"},
    "another-api-version": {"apiVersion": f"{DRIVER}/v1beta9", "kind": "MigDeviceConfig"},
    "no-kind": {"apiVersion": VERSION},
    "another-kind": {"apiVersion": VERSION, "kind": "GpuConfig"},
    "unknown-field": {"apiVersion": VERSION, "kind": "MigDeviceConfig", "sharing": {"strategy": "TimeSlicing"}},
    "env-not-a-mapping": {"apiVersion": VERSION, "kind": "MigDeviceConfig", "env": ["A=1"]},
    "env-name-invalid": {"apiVersion": VERSION, "kind": "MigDeviceConfig", "env": {"1BAD": "x"}},
    "env-name-reserved": {"apiVersion": VERSION, "kind": "MigDeviceConfig", "env": {"CUDA_VISIBLE_DEVICES": "0"}},
    "env-name-reserved-prefix": {"apiVersion": VERSION, "kind": "MigDeviceConfig", "env": {"MIGDRA_X": "1"}},
    "env-value-not-a-string": {"apiVersion": VERSION, "kind": "MigDeviceConfig", "env": {"COUNT": 5}},
    "everything-wrong": {
        "apiVersion": 7,
        "sharing": {},
        "env": {"1BAD": "x", "MIGDRA_A": "1", "NVIDIA_VISIBLE_DEVICES": "all", "COUNT": 5, "OK": "fine"},
    },
}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeApiServer, Client]]:
    """kube-apiserver with the chart's opaque-configuration policy and its binding, in force."""
    require_kube_binaries()
    with kube_apiserver(tmp_path_factory.mktemp("policy")) as server:
        client = Client(server.kubeconfig_path)
        try:
            # A class made before the policy, with a mistake in its configuration: it must stay changeable.
            client.create(DEVICE_CLASSES, device_class("made-before-the-policy", config(kind="MigDeviceConfig")))
            rendered = render()
            policy = rendered.one("ValidatingAdmissionPolicy", "-opaque-config")
            (binding,) = [
                b
                for b in rendered.of_kind("ValidatingAdmissionPolicyBinding")
                if b["spec"]["policyName"] == policy["metadata"]["name"]
            ]
            applied = kubectl(server, "apply", "-f", "-", stdin=yaml.safe_dump_all([policy, binding]))
            assert applied.returncode == 0, applied.stderr
            wait_for("the policy to be in force", lambda: refused(client, claim("probe", config(kind="Nope"))))
            yield server, client
        finally:
            client.close()


def kubectl(server: KubeApiServer, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(server.kubeconfig_path), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def claim(name: str, *entries: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [{"name": "mig", "exactly": {"deviceClassName": "mig.migdra.io"}}],
                "config": list(entries),
            }
        },
    }


def device_class(name: str, *entries: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"config": list(entries)},
    }


def refused(client: Client, body: dict[str, Any]) -> str | None:
    """The API server's message when it refuses to create ``body``; None when it created it (then it is
    deleted again)."""
    kind = (
        CLAIMS
        if body["kind"] == "ResourceClaim"
        else CLAIM_TEMPLATES
        if body["kind"] == "ResourceClaimTemplate"
        else DEVICE_CLASSES
    )
    try:
        client.create(kind, copy.deepcopy(body))
    except ApiException as exc:
        if exc.status != 422:
            raise
        return str(yaml.safe_load(exc.body or "{}").get("message", ""))
    client.delete(kind, body["metadata"].get("namespace"), body["metadata"]["name"])
    return None


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_policy_refuses_what_the_plugin_refuses_in_its_words(api: tuple[KubeApiServer, Client], case: str) -> None:
    _, client = api
    parameters = CASES[case]
    plugins_problems = compute_config_problems(DriverConfigEntry(1, "FromClaim", (), parameters), DRIVER)
    message = refused(client, claim(f"case-{case}", FOREIGN, config(**parameters)))
    if not plugins_problems:
        assert message is None, f"the plugin accepts {parameters}, the policy refused it: {message}"
    else:
        assert message is not None, f"the plugin refuses {parameters} ({plugins_problems}), the policy accepted it"
        for problem in plugins_problems:
            assert f"spec.devices.{problem}" in message
        assert message.count(".opaque.parameters") == len(plugins_problems), "the policy names more than the plugin"


def test_every_mistake_is_named_at_once_with_its_path_in_claims_templates_and_classes(
    api: tuple[KubeApiServer, Client],
) -> None:
    server, client = api
    many = config(
        apiVersion=f"{DRIVER}/v2",
        kind="MigDeviceConfig",
        sharing={},
        env={"1BAD": "x", "CUDA_VISIBLE_DEVICES": "0", "COUNT": 5, "OK": "fine"},
    )
    base = "spec.devices.config[1].opaque.parameters"
    message = refused(client, claim("many", FOREIGN, many))
    assert message is not None
    for problem in (
        f"{base}.apiVersion: unsupported '{DRIVER}/v2'",
        f"{base}.sharing: extra fields not permitted",
        f"{base}.env.1BAD: not a valid environment variable name",
        f"{base}.env.CUDA_VISIBLE_DEVICES: reserved",
        f"{base}.env.COUNT: Input should be a valid string",
    ):
        assert problem in message, problem
    assert ".env.OK" not in message

    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "template", "namespace": "default"},
        "spec": {"spec": claim("", config(apiVersion=VERSION))["spec"]},
    }
    template_message = refused(client, template)
    assert template_message is not None
    assert (
        "spec.spec.devices.config[0].opaque.parameters.kind: required (known kinds: MigDeviceConfig)"
        in template_message
    )
    class_message = refused(client, device_class("bad-class", FOREIGN, config(kind="MigDeviceConfig")))
    assert class_message is not None
    assert f"spec.config[1].opaque.parameters.apiVersion: required (use {VERSION})" in class_message

    # What a user sees: kubectl apply fails, in one message naming the field.
    applied = kubectl(
        server, "apply", "-f", "-", stdin=yaml.safe_dump(claim("with-kubectl", config(apiVersion=VERSION)))
    )
    assert applied.returncode == 1
    assert "spec.devices.config[0].opaque.parameters.kind: required" in applied.stderr


def test_a_class_made_before_the_policy_stays_changeable_until_its_configuration_changes(
    api: tuple[KubeApiServer, Client],
) -> None:
    _, client = api
    patch = {"metadata": {"labels": {"team": "ml"}}}
    assert client.merge_patch(DEVICE_CLASSES, None, "made-before-the-policy", patch)["metadata"]["labels"] == {
        "team": "ml"
    }
    with pytest.raises(ApiException) as refused_change:
        client.merge_patch(
            DEVICE_CLASSES, None, "made-before-the-policy", {"spec": {"config": [config(apiVersion="x")]}}
        )
    assert "spec.config[0].opaque.parameters.apiVersion: unsupported 'x'" in str(refused_change.value.body)
    fixed = {"spec": {"config": [config(apiVersion=VERSION, kind="MigDeviceConfig")]}}
    assert client.merge_patch(DEVICE_CLASSES, None, "made-before-the-policy", fixed)["spec"]["config"]
