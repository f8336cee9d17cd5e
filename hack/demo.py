#!/usr/bin/env python3
"""`make demo`: a simulated cluster (2 nodes x 4 H100 80GB), the workloads of ``demo/``, and what
Kubernetes then shows -- pods Running on MIG devices, claims with their allocations, the pod that
does not fit and why, and which memory slices of which GPU hold which claim.

Everything is the real path: ``migdra sim up`` (upstream etcd, kube-apiserver, kube-controller-manager
and kube-scheduler, built on first use; simulated kubelets) with one ``migdra kubelet-plugin`` process per
node on simulated NVML, the real ``kubectl`` against it, and at the end the pods deleted, every MIG
instance destroyed and the cluster stopped.

``--real-node`` (``make demo-real-node``; root, and ``make node`` once): a third node runs as a real node
-- the upstream kubelet, containerd with CDI and runc (docs/real-node.md) -- and one more pod runs there,
whose container prints what it sees of its MIG device; ``kubectl logs`` shows it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from dra_driver.kube.client import CLAIMS, EVENTS, PODS, Client
from migdra_devcluster.cluster import gpu_instances_per_node

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
NODES, GPUS, DRIVER = 2, "H100-SXM5-80GB:4", "gpu.migdra.io"
REAL_NODE, REAL_NODE_GPUS = "node-3", "H100-SXM5-80GB:1"  # one GPU: the pod that does not fit stays unfit
REAL_NODE_POD = "what-the-container-sees"
UNFIT = "too-big"
# sim up builds the upstream control plane first when `make kube` has not (minutes, its progress shown)
START_TIMEOUT, SETTLE_TIMEOUT, DELETE_TIMEOUT = 1800.0, 120.0, 120.0


def say(text: str) -> None:
    print(text, flush=True)


def kubectl(kubeconfig: Path, *args: str, show: bool = True) -> str:
    """Run the real kubectl; print the command and its output."""
    if show:
        say(f"\n$ kubectl {' '.join(args)}")
    done = subprocess.run(
        [str(BIN / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    if show:  # kubectl says "No resources found ..." on stderr
        say((done.stdout or done.stderr).rstrip())
    return done.stdout


def describe_failed_start(process: subprocess.Popen[str], ended: bool) -> str:
    """Why ``sim up`` never said ready: it failed (its output ended: its exit status), or it is still
    starting after ``START_TIMEOUT`` (then it is stopped).  Its own messages are on stderr above."""
    if ended:
        try:
            status = process.wait(timeout=30)  # the output ended: the process is exiting
        except subprocess.TimeoutExpired:
            process.kill()
            status = process.wait()
        return f"migdra sim up failed (exit status {status}); its messages are above"
    process.terminate()
    return f"migdra sim up did not get ready within {START_TIMEOUT:g} s (its messages are above)"


def start_cluster(workdir: Path, real_node: bool, version: str | None) -> tuple[subprocess.Popen[str], Path]:
    """``migdra sim up`` in the background; returns once it printed ``ready kubeconfig=<path>``."""
    command = [str(BIN / "migdra"), "sim", "up", "--workdir", str(workdir), "--nodes", str(NODES), "--gpus", GPUS]
    if version is not None:
        command += ["--kube-version", version]
    if real_node:
        command[command.index("--nodes") + 1] = str(NODES + 1)
        command += ["--node-gpus", f"{REAL_NODE}={REAL_NODE_GPUS}", "--real-node", REAL_NODE]
    say(f"$ {' '.join(['migdra', *command[1:]])} &")
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(process.stdout.readline() if process.stdout else ""))
    reader.start()
    reader.join(START_TIMEOUT)
    if not line or not line[0].startswith("ready kubeconfig="):
        raise SystemExit(describe_failed_start(process, ended=bool(line)))
    say(line[0].rstrip())
    return process, Path(line[0].strip().split("=", 1)[1])


def wait_settled(client: Client) -> None:
    """Until every demo pod runs, except the one that cannot fit, which has its FailedScheduling Event."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    last = ""
    while True:
        pods, _ = client.list(PODS, "default")
        running = sorted(p["metadata"]["name"] for p in pods if (p.get("status") or {}).get("phase") == "Running")
        others = [p for p in pods if p["metadata"]["name"] != UNFIT]
        events, _ = client.list(
            EVENTS, "default", field_selector=f"involvedObject.name={UNFIT},reason=FailedScheduling"
        )
        claims, _ = client.list(CLAIMS, "default")
        allocated = [c for c in claims if (c.get("status") or {}).get("allocation")]
        described = [c for c in allocated if _reserved_and_ready(c)]
        progress = (
            f"   {len(running)}/{len(others)} pods running; {len(described)}/{len(allocated)} claims Reserved and "
            f"Ready; {UNFIT}: {'FailedScheduling' if events else 'pending'}"
        )
        if progress != last:
            say(progress)
            last = progress
        if others and len(running) == len(others) and events and len(described) == len(allocated):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"the demo pods did not settle within {SETTLE_TIMEOUT:g} s")
        time.sleep(0.2)


def _reserved_and_ready(claim: dict[str, Any]) -> bool:
    """Whether the controller (Reserved) and the plugin (Ready) both wrote every device entry of ours."""
    results = claim["status"]["allocation"]["devices"]["results"]
    ours = {(r["pool"], r["device"]) for r in results if r["driver"] == DRIVER}
    entries = {(e["pool"], e["device"]): e for e in claim["status"].get("devices") or [] if e["driver"] == DRIVER}
    for key in ours:
        types = {c["type"] for c in (entries.get(key) or {}).get("conditions") or []}
        if not {"Reserved", "Ready"} <= types:
            return False
    return True


def claim_of(client: Client, pod: str) -> str:
    found, _ = client.list(CLAIMS, "default")
    for claim in found:
        if any(ref.get("name") == pod for ref in claim["metadata"].get("ownerReferences") or []):
            return str(claim["metadata"]["name"])
    raise SystemExit(f"no claim owned by pod {pod}")


def instances_left(workdir: Path) -> int:
    """MIG GPU instances on every node's simulated GPUs, read through NVML as the plugins read them."""
    return sum(gpu_instances_per_node(workdir).values())


REAL_NODE_MANIFEST = REPO / "demo" / "real-node" / "what-the-container-sees.yaml"


def show_real_node_pod(kubeconfig: Path, client: Client) -> None:
    """The pod of demo/real-node/ on the real node, and what its container printed of its MIG device."""
    say(f"\n== A pod on the real node {REAL_NODE}: the kubelet prepares its claim through migdra's plugin,")
    say("   containerd applies the claim's CDI spec, runc starts the container")
    kubectl(kubeconfig, "apply", "-f", str(REAL_NODE_MANIFEST))
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while time.monotonic() < deadline:
        pod = client.get(PODS, "default", REAL_NODE_POD) or {}
        logs = kubectl(kubeconfig, "logs", REAL_NODE_POD, show=False) if _phase(pod) == "Running" else ""
        if "device metadata:" in logs and "gpu.migdra.io" in logs.split("device metadata:", 1)[1]:
            break
        time.sleep(0.5)
    else:
        kubectl(kubeconfig, "describe", "pod", REAL_NODE_POD)
        raise SystemExit(f"the pod {REAL_NODE_POD} did not run on {REAL_NODE} within {SETTLE_TIMEOUT:g} s")
    kubectl(kubeconfig, "get", "pod", REAL_NODE_POD, "-o", "wide")
    say("\n== What its container sees of its MIG device")
    kubectl(kubeconfig, "logs", REAL_NODE_POD)
    say("\n== Its claim, as kubectl describes it")
    kubectl(kubeconfig, "describe", "resourceclaim", claim_of(client, REAL_NODE_POD))


def _phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--real-node", action="store_true", help=f"run {REAL_NODE} as a real node (root)")
    parser.add_argument("--kube-version", help="the Kubernetes version to run (default: sim up's)")
    args = parser.parse_args()
    workdir = args.state_dir.absolute()
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    started = time.monotonic()
    say(f"== A simulated cluster: {NODES} nodes x {GPUS}, one migdra kubelet plugin process per node")
    say("   control plane: upstream etcd, kube-apiserver, kube-controller-manager, kube-scheduler")
    if args.real_node:
        say(f"   and {REAL_NODE} ({REAL_NODE_GPUS}, simulated): a real node -- upstream kubelet, containerd, runc")
    say("")
    process, kubeconfig = start_cluster(workdir, args.real_node, args.kube_version)
    client = Client(kubeconfig)
    try:
        say("\n== The workloads of demo/ (see demo/README.md)")
        kubectl(kubeconfig, "apply", "-f", str(REPO / "demo"))
        say("\n== Waiting for the scheduler and the kubelets")
        wait_settled(client)

        say("\n== Pods and their claims")
        kubectl(kubeconfig, "get", "pods,resourceclaims", "-o", "wide")
        say("\n== One claim in detail: the device the scheduler allocated and the MIG instance it became")
        kubectl(kubeconfig, "describe", "resourceclaim", claim_of(client, "training-3g"))
        if args.real_node:
            show_real_node_pod(kubeconfig, client)
        say("\n== The pod that cannot fit: what the scheduler says (kube-scheduler: how many nodes, not why)")
        kubectl(
            kubeconfig,
            "get",
            "events",
            "--field-selector",
            f"involvedObject.name={UNFIT},reason=FailedScheduling",
            "-o",
            "custom-columns=TYPE:.type,REASON:.reason,MESSAGE:.message",
        )
        say("\n== Why, on every node, in the words of kube's allocator (migdra allocate reads the cluster)")
        say(f"\n$ migdra allocate --from-cluster --kubeconfig {kubeconfig} --pod default/{UNFIT}")
        explain = ["allocate", "--from-cluster", "--kubeconfig", str(kubeconfig), "--pod", f"default/{UNFIT}"]
        why = subprocess.run(
            [str(BIN / "migdra"), *explain],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if why.returncode != 3:  # 3: the claims fit on no node
            raise SystemExit(f"migdra allocate answered {why.returncode}: {why.stderr.strip()}")
        say(why.stdout.rstrip())
        say("\n== Which memory slices of which GPU hold which claim, realized or not, and what still fits")
        say(f"\n$ migdra status --kubeconfig {kubeconfig}")
        status = subprocess.run(
            [str(BIN / "migdra"), "status", "--kubeconfig", str(kubeconfig)],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if status.returncode != 0:
            raise SystemExit(f"migdra status failed ({status.returncode}): {status.stderr.strip()}")
        say(status.stdout)

        say("== Deleting the workloads: kubelets unprepare, MIG instances are destroyed, generated claims go")
        kubectl(kubeconfig, "delete", "-f", str(REPO / "demo"), "--wait=true", "--timeout=90s")
        if args.real_node:
            kubectl(kubeconfig, "delete", "-f", str(REAL_NODE_MANIFEST), "--wait=true", "--timeout=90s")
        deadline = time.monotonic() + DELETE_TIMEOUT
        while client.list(CLAIMS)[0] and time.monotonic() < deadline:
            time.sleep(0.2)
        kubectl(kubeconfig, "get", "resourceclaims")
        say(f"   MIG instances left on the simulated GPUs: {instances_left(workdir)}")
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=60)
    say(f"\n== Done in {time.monotonic() - started:.0f} s; the cluster is stopped (logs in {workdir}).")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
