"""The command lines of etcd, kube-apiserver, kube-controller-manager and kube-scheduler.  Pure: what to
run follows from the ports, the files and the version; starting them is :mod:`.controlplane`'s job.

Every choice that differs from a component's default is here with its reason (docs/local-cluster.md
repeats them for users):

- everything listens on 127.0.0.1 only, on ports chosen free at start-up;
- etcd runs without fsync (``--unsafe-no-fsync``): its data is a throw-away development cluster's, and
  fsync on a busy two-core machine makes every write wait on the disk;
- kube-apiserver: TLS from the cluster CA, ServiceAccount tokens signed with the cluster key,
  ``--authorization-mode=Node,RBAC``, the NodeRestriction admission plugin on top of the default set
  (which already enforces ValidatingAdmissionPolicy), no endpoint reconciler (the ``kubernetes``
  Service would get 127.0.0.1, which Endpoints validation refuses);
- kube-controller-manager: every default controller but those whose work needs parts simulated nodes
  do not have (:data:`DISABLED_CONTROLLERS`), each controller with its own ServiceAccount's credentials
  as in kubeadm clusters;
- kube-scheduler: the default profile, no leader election (one replica);
- an audit log (``kube/audit.log``, one JSON line per request at the Metadata level): who called what,
  and what the authorizer and admission answered -- how tests list what each migdra component was
  granted and refused, and count its requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from migdra_devcluster.upstream.pki import ClusterPki

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

FEATURE_GATES: Mapping[str, str] = {
    "DRADeviceBindingConditions": "realize-before-bind: the scheduler waits for the plugin's binding conditions",
    "DRAResourceClaimDeviceStatus": "status.devices (placement, MIG identity, Ready) and, with the gate above, "
    "binding conditions",
    "DRAExtendedResource": "nvidia.com/mig-* extended resources served by DeviceClasses",
    "DRADeviceTaints": "GPU fault taints on devices (XID, double-bit ECC, GPU lost)",
    "DRAPartitionableDevices": "shared counters: overlapping MIG placements exclude each other",
    "DRAConsumableCapacity": "allowMultipleAllocations and request policies (shared GPU instances)",
}
"""The DRA feature gates migdra relies on, each turned on explicitly (all are beta and on by default in
1.36; some are GA in 1.37), with what needs it."""

DISABLED_CONTROLLERS: Mapping[str, str] = {
    "persistentvolume-binder-controller": "no volumes: simulated nodes run no storage",
    "persistentvolume-attach-detach-controller": "no volumes",
    "persistentvolume-expander-controller": "no volumes",
    "persistentvolumeclaim-protection-controller": "no volumes",
    "persistentvolume-protection-controller": "no volumes",
    "ephemeral-volume-controller": "no volumes",
    "volumeattributesclass-protection-controller": "no volumes",
    "selinux-warning-controller": "no volumes",
    "endpoints-controller": "no pod network: Services have no reachable endpoints",
    "endpointslice-controller": "no pod network",
    "endpointslice-mirroring-controller": "no pod network",
    "node-ipam-controller": "no pod network: the simulated kubelet gives pods their addresses",
    "horizontal-pod-autoscaler-controller": "no metrics API",
    "certificatesigningrequest-signing-controller": "no kubelet TLS bootstrap: simulated kubelets need no certificate",
    "certificatesigningrequest-approving-controller": "no kubelet TLS bootstrap",
    "certificatesigningrequest-cleaner-controller": "no kubelet TLS bootstrap",
}
"""kube-controller-manager controllers turned off, with why.  The rest of the default set runs: among them
resourceclaim (claims from templates, reservations, deallocation), garbage-collector, namespace,
serviceaccount and serviceaccount-token, node-lifecycle, taint-eviction and device-taint-eviction, pod
garbage collection, root-ca-certificate-publisher and the workload controllers (Deployments, Jobs …)."""


@dataclass(frozen=True)
class Ports:
    """The loopback ports of one cluster."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int


@dataclass(frozen=True)
class KubeFiles:
    """Where the control plane's files live: ``<workdir>/kube``."""

    directory: Path

    @property
    def pki(self) -> ClusterPki:
        return ClusterPki(self.directory / "pki")

    @property
    def etcd_data(self) -> Path:
        return self.directory / "etcd"

    def kubeconfig(self, component: str) -> Path:
        return self.directory / f"{component}.kubeconfig"

    @property
    def audit_policy(self) -> Path:
        return self.directory / "audit-policy.yaml"

    @property
    def audit_log(self) -> Path:
        return self.directory / "audit.log"

    def log(self, component: str) -> Path:
        return self.directory / f"{component}.log"

    def pid(self, component: str) -> Path:
        return self.directory / f"{component}.pid"


AUDIT_POLICY: Mapping[str, object] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}
"""Every request once, at its end, without bodies: the user, verb, object and response code."""


def feature_gates_flag() -> str:
    return "--feature-gates=" + ",".join(f"{gate}=true" for gate in sorted(FEATURE_GATES))


def build_etcd_argv(binary: Path, files: KubeFiles, ports: Ports) -> list[str]:
    client, peer = f"http://127.0.0.1:{ports.etcd_client}", f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binary),
        "--name=migdra-sim",
        f"--data-dir={files.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=migdra-sim={peer}",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


def build_apiserver_argv(binary: Path, files: KubeFiles, ports: Ports) -> list[str]:
    pki = files.pki
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={files.directory / 'apiserver-certs'}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_cert}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.service_account_public_key}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        # kubectl logs/exec on a real node: reach its kubelet at the node's address, as this client
        f"--kubelet-client-certificate={pki.kubelet_client_cert}",
        f"--kubelet-client-key={pki.kubelet_client_key}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--allow-privileged=true",
        "--endpoint-reconciler-type=none",
        f"--audit-policy-file={files.audit_policy}",
        f"--audit-log-path={files.audit_log}",
        "--audit-log-format=json",
        "--profiling=false",
        feature_gates_flag(),
    ]


def _client_and_serving_flags(files: KubeFiles, component: str, port: int, certs: str) -> list[str]:
    """How kube-controller-manager and kube-scheduler reach the API server (their own kubeconfig, also
    to check who calls their health and metrics endpoints) and serve those on loopback, with the
    certificate they make themselves in ``<certs>-certs``."""
    kubeconfig = files.kubeconfig(component)
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={files.directory / f'{certs}-certs'}",
    ]


def build_controller_manager_argv(binary: Path, files: KubeFiles, ports: Ports) -> list[str]:
    return [
        str(binary),
        *_client_and_serving_flags(files, "kube-controller-manager", ports.controller_manager, "controller-manager"),
        "--controllers=*," + ",".join(f"-{name}" for name in DISABLED_CONTROLLERS),
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={files.pki.service_account_key}",
        f"--root-ca-file={files.pki.ca_cert}",
        "--leader-elect=false",
        "--profiling=false",
        feature_gates_flag(),
    ]


def build_scheduler_argv(binary: Path, files: KubeFiles, ports: Ports) -> list[str]:
    return [
        str(binary),
        *_client_and_serving_flags(files, "kube-scheduler", ports.scheduler, "scheduler"),
        "--leader-elect=false",
        "--profiling=false",
        feature_gates_flag(),
    ]
