"""``migdra sim apiserver`` as a process: its kubeconfig works for kubectl, its snapshot survives a
restart, and a token file turns authentication on."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from tests.devcluster.integration.test_apiserver_kubectl import kubectl_binary
from tests.waiting import wait_for


@contextmanager
def apiserver_process(kubeconfig: Path, *extra: str) -> Iterator[subprocess.Popen[str]]:
    kubeconfig.unlink(missing_ok=True)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dra_driver.cli.main",
            "sim",
            "apiserver",
            "--port",
            "0",
            "--kubeconfig-out",
            str(kubeconfig),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:

        def written() -> bool:
            assert process.poll() is None, f"the API server exited: {process.communicate()[1]}"
            return kubeconfig.exists()

        wait_for("the kubeconfig to be written", written, timeout=20)
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.communicate(timeout=20)


def configmap(name: str, data: dict[str, str]) -> str:
    # For `kubectl create -f`, which sends JSON (`kubectl create configmap` sends protobuf).
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl_binary(), "--kubeconfig", str(kubeconfig), "--cache-dir", str(kubeconfig.parent / "cache"), *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        check=False,
    )


def test_sim_apiserver_serves_kubectl_and_keeps_its_snapshot(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    snapshot = tmp_path / "state.json"
    with apiserver_process(kubeconfig, "--snapshot", str(snapshot)) as process:
        config = yaml.safe_load(kubeconfig.read_text())
        assert config["clusters"][0]["cluster"]["server"].startswith("http://127.0.0.1:")
        created = kubectl(kubeconfig, "create", "configmap", "kept", "--from-literal=k=v")  # a protobuf body
        assert created.returncode == 0, created.stderr
        version = json.loads(kubectl(kubeconfig, "get", "cm", "kept", "-o", "json").stdout)["metadata"][
            "resourceVersion"
        ]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    saved = json.loads(snapshot.read_text())
    assert "kept" in [entry["object"]["metadata"]["name"] for entry in saved["objects"]]

    with apiserver_process(kubeconfig, "--snapshot", str(snapshot)):
        again = json.loads(kubectl(kubeconfig, "get", "cm", "kept", "-o", "json").stdout)
        assert again["data"] == {"k": "v"}
        assert again["metadata"]["resourceVersion"] == version
        newer = kubectl(kubeconfig, "create", "-f", "-", stdin=configmap("newer", {}))
        assert newer.returncode == 0
        newer_obj = json.loads(kubectl(kubeconfig, "get", "cm", "newer", "-o", "json").stdout)
        assert int(newer_obj["metadata"]["resourceVersion"]) > int(version), "versions continue after a restart"


def test_sim_apiserver_with_a_token_file(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.csv"
    tokens.write_text("s3cret,admin,uid-admin,system:masters\n")
    kubeconfig = tmp_path / "kubeconfig"
    with apiserver_process(kubeconfig, "--token-file", str(tokens)):
        config = yaml.safe_load(kubeconfig.read_text())
        assert config["users"][0]["user"] == {"token": "s3cret"}
        assert kubectl(kubeconfig, "get", "ns").returncode == 0
        config["users"][0]["user"] = {"token": "wrong"}
        wrong = tmp_path / "wrong-kubeconfig"
        wrong.write_text(yaml.safe_dump(config))
        refused = kubectl(wrong, "get", "ns")
        assert refused.returncode == 1
        assert "Unauthorized" in refused.stderr
