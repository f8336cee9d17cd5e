"""``make demo-real-node``: the demo with a real node, run as its Makefile target runs it; the pod there
runs on a MIG device and ``kubectl logs`` shows what its container sees of it; everything is torn down
and the host restored."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.kubelet_client import short_socket_dir
from tests.node.real_node import require_real_node
from tests.sim_cluster import REPO

pytestmark = pytest.mark.xdist_group("real-node")


@pytest.mark.timeout(600)  # the whole demo: three nodes, seven workloads, the real node's pod, teardown
def test_the_real_node_demo_shows_what_the_container_sees_of_its_mig_device() -> None:
    version = require_real_node()
    with short_socket_dir() as root:
        demo = [sys.executable, str(REPO / "hack" / "demo.py"), "--state-dir", str(root / "demo")]
        done = subprocess.run(
            [*demo, "--real-node", "--kube-version", version],
            capture_output=True,
            text=True,
            timeout=540,
            check=False,
        )
    output = done.stdout
    assert done.returncode == 0, f"{output[-4000:]}\n{done.stderr[-3000:]}"
    logs = output.split("$ kubectl logs what-the-container-sees", 1)[1].split("==", 1)[0]
    assert "GREETING=set-by-the-claim" in logs  # the claim's configuration, through CDI
    mig_uuid = re.search(r"^MIGDRA_MIG_UUID=(MIG-[0-9a-f-]+)$", logs, re.MULTILINE)
    assert mig_uuid is not None, logs
    assert re.search(r"^c\S+.*195,\s+0 .*/dev/nvidia0$", logs, re.MULTILINE), logs
    assert len(re.findall(r"^c\S+.*509,\s+\d+ .*nvidia-cap\d+$", logs, re.MULTILINE)) == 2, logs
    assert "libcuda.so.1" in logs
    assert '"driver": "gpu.migdra.io"' in logs  # the KEP-5304 metadata file
    described = output.split("== Its claim, as kubectl describes it", 1)[1]
    assert mig_uuid[1] in described
    assert "MIG instances left on the simulated GPUs: 0" in output
    assert "node-3: host restored" in done.stderr
