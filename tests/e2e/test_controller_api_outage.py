"""The reservation controller through an API server outage: a leader that cannot renew its Lease
exits (status 1) rather than keep writing as a possible second leader; without leader election it
waits the outage out, writes nothing it cannot read, and converges what changed once the server is
back.  Every wait is on an explicit signal (a line of the process's output, a write to the store)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.kube.client import CLAIMS, SLICES, Client
from tests.api_outage import OutputLines, RestartableApiServer, restartable_api_server
from tests.integration.test_controller_process import NODE, THREE_G_AT_4, allocate
from tests.plugin_command import MIGDRA
from tests.sim_objects import DRIVER, H100, claim_view, node_slices
from tests.waiting import wait_for

ONE_G_AT_0 = "gpu-0-mig-1g10gb-19-0"  # does not overlap THREE_G_AT_4


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[RestartableApiServer, Path]]:
    with restartable_api_server(tmp_path) as server:
        kubeconfig = tmp_path / "kubeconfig"
        server.write_kubeconfig(kubeconfig)
        client = Client(kubeconfig)
        for resource_slice in node_slices(NODE, [H100]):
            client.create(SLICES, resource_slice)
        client.close()
        yield server, kubeconfig


def _controller(kubeconfig: Path, *args: str) -> tuple[subprocess.Popen[str], OutputLines]:
    process = subprocess.Popen(
        [MIGDRA, "-v", "controller", "--kubeconfig", str(kubeconfig), "--lease-namespace", "default", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    return process, OutputLines(process.stdout)


def _reserved(client: Client, name: str, device: str) -> bool:
    stored = client.get(CLAIMS, "default", name)
    if stored is None:
        return False
    entry = claim_view(stored).status_entry(DRIVER, NODE, device)
    return entry is not None and entry.condition("Reserved") is not None


def test_a_leader_that_cannot_renew_its_lease_exits(api: tuple[RestartableApiServer, Path]) -> None:
    server, kubeconfig = api
    process, output = _controller(
        kubeconfig, "--identity", "only", "--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.5"
    )
    try:
        output.wait_for_line("the controller to lead", lambda line: "became leader" in line)
        server.stop()
        output.wait_for_line("the leader to give up", lambda line: "lost leadership" in line, timeout=60)
        assert process.wait(timeout=60) == 1
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        output.join()


def test_without_leader_election_an_outage_is_waited_out_and_what_changed_is_converged(
    api: tuple[RestartableApiServer, Path],
) -> None:
    server, kubeconfig = api
    client = Client(kubeconfig)
    process, output = _controller(kubeconfig, "--no-leader-elect", "--identity", "single")
    try:
        output.wait_for_line("the controller to start", lambda line: "reserving claims of" in line)
        allocate(client, "before", THREE_G_AT_4)
        wait_for(
            "the claim before the outage reserved",
            lambda: _reserved(client, "before", THREE_G_AT_4),
        )

        server.stop()  # the controller's watches break; its informers list again with a backoff
        server.start()  # the same port, the same etcd: every object as it was
        allocate(client, "after", ONE_G_AT_0)
        wait_for(
            "the claim made after the outage",
            lambda: _reserved(client, "after", ONE_G_AT_0),
            timeout=60,
        )
        assert _reserved(client, "before", THREE_G_AT_4), "what was written before the outage stays"
        assert process.poll() is None, "the controller without leader election survives the outage"
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=30)
        output.join()
