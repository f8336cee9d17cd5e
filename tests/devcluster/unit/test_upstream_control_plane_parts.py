"""The pure parts of the upstream control plane ``sim up`` runs: which binaries are found (and when they
are built first), the components' command lines, the PKI's identities, and the pinning module ``make
kube`` builds from (no process is started)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from dra_driver.errors import ConfigurationError
from migdra_devcluster.upstream import binaries
from migdra_devcluster.upstream.binaries import COMPONENTS, ensure_binaries, find_binaries, kube_version_problem
from migdra_devcluster.upstream.components import (
    DISABLED_CONTROLLERS,
    FEATURE_GATES,
    KubeFiles,
    Ports,
    build_apiserver_argv,
    build_controller_manager_argv,
    build_scheduler_argv,
)
from migdra_devcluster.upstream.pki import write_cluster_pki

REPO = Path(__file__).resolve().parents[3]
ETCD_LINE = {"1.36": "v3.6.", "1.37": "v3.7."}


def built(tools: Path, *versions: str) -> Path:
    for version in versions:
        (tools / version / "bin").mkdir(parents=True)
        for component in COMPONENTS:
            (tools / version / "bin" / component).write_text("#!/bin/sh\n")
    return tools


@pytest.mark.parametrize(
    ("wanted", "chosen"),
    [(None, "v1.37.2"), ("1.36", "v1.36.5"), ("v1.36.3", "v1.36.3"), ("1.37", "v1.37.2")],
    ids=["newest", "minor", "exact", "other-minor"],
)
def test_the_built_version_asked_for_is_found(tmp_path: Path, wanted: str | None, chosen: str) -> None:
    tools = built(tmp_path, "v1.36.3", "v1.36.5", "v1.37.2")
    found = find_binaries(None, wanted, tools)
    assert found.version == chosen
    assert found.path("kube-apiserver") == tools / chosen / "bin" / "kube-apiserver"


def test_a_version_missing_a_component_does_not_count(tmp_path: Path) -> None:
    tools = built(tmp_path, "v1.36.5", "v1.37.2")
    (tools / "v1.37.2" / "bin" / "kube-scheduler").unlink()
    assert find_binaries(None, None, tools).version == "v1.36.5"


@pytest.mark.parametrize(
    ("versions", "wanted", "message"),
    [
        ((), None, "no Kubernetes binaries in {tools}; build them with `make kube`"),
        (("v1.36.5",), "1.35", "--kube-version 1.35: not built (built: v1.36.5)"),
    ],
    ids=["nothing-built", "version-not-built"],
)
def test_missing_binaries_are_one_line_that_names_make_kube(
    tmp_path: Path, versions: tuple[str, ...], wanted: str | None, message: str
) -> None:
    tools = built(tmp_path / "kube", *versions)
    with pytest.raises(ConfigurationError) as caught:
        find_binaries(None, wanted, tools)
    assert message.format(tools=tools) in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("built_before", "wanted", "builds", "chosen"),
    [
        ((), None, ["1.36"], "v1.36.5"),
        (("v1.36.5",), None, [], "v1.36.5"),
        (("v1.36.5",), "1.37", ["1.37"], "v1.37.2"),
        (("v1.36.5", "v1.37.2"), "1.37", [], "v1.37.2"),
    ],
    ids=["nothing-built-builds-the-default", "something-built-builds-nothing", "another-minor", "asked-and-built"],
)
def test_sim_up_builds_a_minor_only_when_it_is_not_built(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    built_before: tuple[str, ...],
    wanted: str | None,
    builds: list[str],
    chosen: str,
) -> None:
    tools = built(tmp_path / "kube", *built_before)
    done: list[str] = []

    def build(minor: str, progress: object) -> None:  # stands in for `make kube`'s script
        done.append(minor)
        built(tools, {"1.36": "v1.36.5", "1.37": "v1.37.2"}[minor])

    monkeypatch.setattr(binaries, "build_minor", build)
    assert ensure_binaries(None, wanted, lambda line: None, tools).version == chosen
    assert done == builds


def test_a_version_neither_built_nor_pinned_is_one_line_naming_the_pinned_minors(tmp_path: Path) -> None:
    tools = built(tmp_path / "kube", "v1.36.5")
    assert kube_version_problem("1.36", tools) is None
    assert kube_version_problem("1.37", tools) is None  # pinned: built on first use
    assert kube_version_problem("v1.36.5", tools) is None
    assert kube_version_problem("1.20", tools) == (
        "--kube-version 1.20: neither built nor pinned (pinned: 1.36, 1.37; `make kube KUBE_VERSIONS=...`)"
    )
    assert kube_version_problem("v1.37.9", tools) is not None  # a patch release of its own is not buildable


def argv_flags(argv: list[str]) -> dict[str, str]:
    return dict(arg[2:].split("=", 1) for arg in argv[1:] if "=" in arg)


def test_the_api_server_authorizes_like_a_cluster_and_enables_the_dra_gates(tmp_path: Path) -> None:
    files, ports = KubeFiles(tmp_path), Ports(1, 2, 3, 4, 5)
    flags = argv_flags(build_apiserver_argv(Path("/bin/kube-apiserver"), files, ports))
    assert flags["authorization-mode"] == "Node,RBAC"
    assert flags["enable-admission-plugins"] == "NodeRestriction"
    assert flags["secure-port"] == "3"
    assert flags["etcd-servers"] == "http://127.0.0.1:1"
    assert flags["bind-address"] == "127.0.0.1"
    assert flags["audit-log-path"] == str(files.audit_log)
    gates = dict(item.split("=") for item in flags["feature-gates"].split(","))
    assert gates == dict.fromkeys(FEATURE_GATES, "true")
    assert {"DRADeviceBindingConditions", "DRAConsumableCapacity", "DRAPartitionableDevices"} <= set(gates)


def test_the_controller_manager_runs_the_claim_controller_and_turns_off_only_the_listed_ones(tmp_path: Path) -> None:
    files = KubeFiles(tmp_path)
    flags = argv_flags(build_controller_manager_argv(Path("/bin/kcm"), files, Ports(1, 2, 3, 4, 5)))
    controllers = flags["controllers"].split(",")
    assert controllers[0] == "*"
    assert {c[1:] for c in controllers[1:]} == set(DISABLED_CONTROLLERS)
    for needed in ("resourceclaim-controller", "garbage-collector-controller", "namespace-controller"):
        assert needed not in DISABLED_CONTROLLERS
    assert flags["use-service-account-credentials"] == "true"
    assert flags["service-account-private-key-file"] == str(files.pki.service_account_key)
    scheduler = argv_flags(build_scheduler_argv(Path("/bin/ks"), files, Ports(1, 2, 3, 4, 5)))
    assert scheduler["kubeconfig"] == str(files.kubeconfig("kube-scheduler"))
    assert scheduler["leader-elect"] == "false"


def test_client_certificates_carry_the_user_and_groups_the_authorizer_reads(tmp_path: Path) -> None:
    pki = write_cluster_pki(tmp_path / "pki")
    cert = x509.load_pem_x509_certificate(pki.client_certificate("admin", ("system:masters",)).cert_pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == ["system:masters"]
    ca = x509.load_pem_x509_certificate(pki.ca_pem())
    assert cert.issuer == ca.subject
    serving = x509.load_pem_x509_certificate(pki.serving_cert.read_bytes())
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in names.get_values_for_type(x509.DNSName)
    assert {str(ip) for ip in names.get_values_for_type(x509.IPAddress)} >= {"127.0.0.1"}
    for key in (pki.ca_key, pki.serving_key, pki.service_account_key):
        assert key.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("module", sorted(REPO.glob("hack/kube/*/go.mod")), ids=lambda p: p.parent.name)
def test_the_pinning_module_pins_every_staging_module_to_the_release(module: Path) -> None:
    text = module.read_text()
    minor = module.parent.name
    (kubernetes,) = re.findall(r"^\s*k8s\.io/kubernetes (v\S+)(?: // indirect)?$", text, re.MULTILINE)
    assert kubernetes.startswith(f"v{minor}."), kubernetes
    staging = f"v0.{minor.split('.')[1]}.{kubernetes.rsplit('.', 1)[1]}"
    replaced = dict(re.findall(r"^\s*(k8s\.io/\S+) => \1 (v\S+)$", text, re.MULTILINE))
    assert {"k8s.io/api", "k8s.io/apiserver", "k8s.io/client-go", "k8s.io/dynamic-resource-allocation"} <= set(replaced)
    assert set(replaced.values()) == {staging}, replaced
    (etcd,) = re.findall(r"^\s*go\.etcd\.io/etcd/server/v3 (v\S+)(?: // indirect)?$", text, re.MULTILINE)
    # the etcd release that Kubernetes version's own go.mod selects (its client and server agree)
    assert etcd.startswith(ETCD_LINE[minor]), etcd
    tools = re.search(r"^tool \(\n(.*?)^\)", text, re.MULTILINE | re.DOTALL)
    assert tools is not None
    assert set(tools.group(1).split()) == {
        "go.etcd.io/etcd/server/v3",
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-scheduler",
        "k8s.io/kubernetes/cmd/kubelet",  # a real node's (`make node`), from the same pins
    }
    assert (module.parent / "go.sum").is_file()
    assert sorted(p.name for p in module.parent.iterdir()) == ["go.mod", "go.sum"], "only the pins, no Go code"
