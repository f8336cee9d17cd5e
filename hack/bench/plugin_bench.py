#!/usr/bin/env python3
"""Benchmark: how fast `migdra kubelet-plugin` starts, and what an idle rescan costs.

**Start-up** (wall time, each run a fresh node): `migdra kubelet-plugin` against kube-apiserver
with a simulated 8x H100, from the process's start to its kubelet registration socket being there, and
to its ResourceSlices being published (the one line it prints after the first publish).  Beside it, in
the same runs (interleaved, rotated), the floors no Python DRA plugin gets under:

- `python -c pass`: the interpreter alone;
- the imports any Python DRA plugin must make: grpc, the generated DRAPlugin (v1, v1beta1) and
  registration protos, and the kubernetes client's configuration loader and transport
  (``kubernetes.client.api_client``) -- the strongest simple alternative, which talks JSON itself;
- the same plus ``kubernetes.client.api.resource_v1_api``, the typed resource API a plugin usually uses.

**Idle rescan** (CPU seconds, ``time.process_time``, in a worker process; the API server is another
process): one round of the plugin's own publish loop -- NVML rescan, pool, compare with the API -- on
an unchanged 8x H100 node, which writes nothing.  Baseline: the LIST of the node's slices alone, as
raw bytes over the same HTTP connection: the least any publisher that checks the API must do.

``--tree PATH`` measures the migdra source tree at PATH instead of this checkout (e.g. an older commit
extracted with ``git archive``), so a change can be measured before and after on the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import IO, Any

from benchlib import REPO, Report, add_common_arguments, api_server_process, check_runs, ratios, stop_process, summary

NODE = "node-bench"
DRIVER = "gpu.migdra.io"
SIM_GPUS = "H100-SXM5-80GB:8"
SERVING = "migdra kubelet-plugin: serving node"
WAIT = 120.0  # bound on any one wait; a healthy plugin takes seconds


def _floor_imports(tree: Path) -> str:
    """The imports any Python DRA plugin must make, from where ``tree`` keeps the generated protos
    (``dra_driver/kubelet/protos``; a baseline tree from before it, ``dra_driver/kubeletapi``)."""
    protos = (
        "dra_driver.kubelet.protos"
        if (tree / "dra_driver" / "kubelet" / "protos").is_dir()
        else "dra_driver.kubeletapi"
    )
    return (
        "import grpc; "
        f"import {protos}.dra_v1_pb2_grpc, {protos}.dra_v1beta1_pb2_grpc; "
        f"import {protos}.pluginregistration_v1_pb2_grpc; "
        "import kubernetes.config, kubernetes.client.api_client"
    )


def _env(tree: Path) -> dict[str, str]:
    """This environment without migdra's settings, the measured tree first on the path (children run
    `python -m` in the tree, too: the working directory comes before ``PYTHONPATH``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIGDRA_")}
    env["PYTHONPATH"] = str(tree)
    return env


@contextmanager
def api_server(root: Path) -> Iterator[tuple[str, Path]]:
    """kube-apiserver as its own processes (its CPU is not the plugin's), with this node's Node."""
    from dra_driver.kube.client import NODES, Client  # noqa: PLC0415 -- this tree's, for the set-up only

    with api_server_process(root) as (url, kubeconfig), closing(Client(kubeconfig)) as kube:
        kube.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        yield url, kubeconfig


def _delete_slices(kubeconfig: Path) -> None:
    from dra_driver.kube.client import SLICES, Client  # noqa: PLC0415

    with closing(Client(kubeconfig)) as kube:
        for item in kube.list(SLICES)[0]:
            kube.delete(SLICES, None, item["metadata"]["name"])


# -- start-up --------------------------------------------------------------------------------------


def _time_exit(argv: list[str], env: dict[str, str], tree: Path) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, cwd=tree, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def _watch_for(stream: IO[str], line_start: str, seen: threading.Event, lines: list[str]) -> None:
    for line in stream:
        lines.append(line)
        if line.startswith(line_start):
            seen.set()


def _time_plugin(tree: Path, url: str, kubeconfig: Path) -> tuple[float, float]:
    """Seconds from the plugin's start to its registration socket, and to its slices published."""
    _delete_slices(kubeconfig)
    with tempfile.TemporaryDirectory(prefix="migdra-bench-") as directory:
        root = Path(directory)
        for name in ("registry", "plugin", "cdi", "proc"):
            (root / name).mkdir()
        argv = [sys.executable, "-m", "dra_driver.cli.main", "kubelet-plugin", "--node-name", NODE]
        argv += ["--kubeconfig", str(kubeconfig), "--registry-dir", str(root / "registry")]
        argv += ["--plugin-dir", str(root / "plugin"), "--cdi-dir", str(root / "cdi"), "--nvml", "simulated"]
        argv += ["--sim-state", str(root / "nvml.json"), "--sim-gpus", SIM_GPUS]
        socket = root / "registry" / f"{DRIVER}-reg.sock"
        published = threading.Event()
        lines: list[str] = []
        started = time.perf_counter()
        plugin = subprocess.Popen(
            argv,
            env={**_env(tree), "MIGDRA_PROC_ROOT": str(root / "proc")},
            cwd=tree,  # `python -m` puts the working directory first on the path: the measured tree's
            stderr=subprocess.PIPE,
            text=True,
        )
        assert plugin.stderr is not None
        reader = threading.Thread(target=_watch_for, args=(plugin.stderr, SERVING, published, lines), daemon=True)
        reader.start()
        try:
            registered = None
            deadline = started + WAIT
            while registered is None:
                if socket.exists():
                    registered = time.perf_counter() - started
                elif plugin.poll() is not None or time.perf_counter() > deadline:
                    raise SystemExit("the plugin did not register:\n" + "".join(lines))
                else:
                    time.sleep(0.002)
            if not published.wait(max(0.0, deadline - time.perf_counter())):
                raise SystemExit("the plugin did not publish:\n" + "".join(lines))
            done = time.perf_counter() - started
        finally:
            stop_process(plugin)
            reader.join(timeout=10)
    return registered, done


def measure_start_up(report: Report, tree: Path, runs: int, url: str, kubeconfig: Path) -> None:
    env = _env(tree)
    floors = {
        "pass": [sys.executable, "-c", "pass"],
        "floor": [sys.executable, "-c", _floor_imports(tree)],
        "typed": [sys.executable, "-c", _floor_imports(tree) + "; import kubernetes.client.api.resource_v1_api"],
    }
    samples: dict[str, list[float]] = {name: [] for name in (*floors, "registered", "published")}
    for argv in floors.values():  # warm-up: page cache and bytecode, uncounted
        _time_exit(argv, env, tree)
    _time_plugin(tree, url, kubeconfig)
    for run in range(runs):
        order = [*floors, "plugin"]
        order = order[run % len(order) :] + order[: run % len(order)]
        for name in order:
            if name == "plugin":
                registered, published = _time_plugin(tree, url, kubeconfig)
                samples["registered"].append(registered)
                samples["published"].append(published)
            else:
                samples[name].append(_time_exit(floors[name], env, tree))
    table = report.table(
        "startup",
        f"`migdra kubelet-plugin` start-up, simulated {SIM_GPUS} (wall time, median (min-max))",
        ["process", "wall time", "x the import floor"],
    )

    def ms(values: list[float]) -> dict[str, Any]:
        return summary([v * 1000 for v in values], "ms", 0)

    table.add("`python -c pass`", ms(samples["pass"]), summary(ratios(samples["pass"], samples["floor"]), "x", 2))
    table.add(
        "floor: `import grpc`, the DRA and registration protos, kubernetes config + ApiClient",
        ms(samples["floor"]),
        summary([1.0] * runs, "x", 2),
    )
    table.add(
        "floor + `kubernetes.client.api.resource_v1_api` (the typed resource API)",
        ms(samples["typed"]),
        summary(ratios(samples["typed"], samples["floor"]), "x", 2),
    )
    table.add(
        "plugin: start to registration socket",
        ms(samples["registered"]),
        summary(ratios(samples["registered"], samples["floor"]), "x", 2),
    )
    table.add(
        "plugin: start to slices published",
        ms(samples["published"]),
        summary(ratios(samples["published"], samples["floor"]), "x", 2),
    )


# -- idle rescan (worker process) ------------------------------------------------------------------


def rescan_worker(kubeconfig: Path, runs: int, rescans: int, state: Path) -> None:
    """In the measured tree: publish once, then per run the CPU of ``rescans`` unchanged rounds and of as
    many raw LISTs; prints ``{"rescan": [...], "list": [...], "writes": N}`` (seconds per round)."""
    import importlib  # noqa: PLC0415 -- the worker imports the measured tree only here
    import importlib.util  # noqa: PLC0415
    import inspect  # noqa: PLC0415
    import threading as worker_threading  # noqa: PLC0415

    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    from dra_driver.nvml.session import open_nvml  # noqa: PLC0415
    from dra_driver.nvml.settings import build_nvml_settings  # noqa: PLC0415
    from kubeletplugin import app, publisher  # noqa: PLC0415

    # dra_driver/kube/config.py loads the configuration; a baseline tree from before it had dra_driver/kubeapi.py.
    has_kube_config = importlib.util.find_spec("dra_driver.kube.config") is not None
    kube_config = importlib.import_module("dra_driver.kube.config" if has_kube_config else "dra_driver.kubeapi")
    load_client_configuration, new_api_client = kube_config.load_client_configuration, kube_config.new_api_client
    configuration = load_client_configuration(kubeconfig, flag="--kubeconfig", usual_rules=False)
    settings = build_nvml_settings(nvml="simulated", sim_state=state, sim_gpus=SIM_GPUS, sim_mig_enabled=True)
    with new_api_client(configuration) as api_client, open_nvml(settings) as nvml:
        # kubeletplugin/settings.py holds the settings; a baseline tree from before it kept them in app.py.
        settings_module = app if hasattr(app, "PluginSettings") else importlib.import_module("kubeletplugin.settings")
        plugin_settings = settings_module.PluginSettings(node_name=NODE)
        # kubeletplugin/publishing.py holds the publishing part; a baseline tree from before it kept it in app.py.
        publishing_class = getattr(app, "_Publishing", None)
        if publishing_class is None:
            publishing_class = importlib.import_module("kubeletplugin.publishing").Publishing
        publishing = publishing_class(plugin_settings, CollectorRegistry(), worker_threading.Event())
        # The publisher talks through the one JSON client; a baseline tree from before it took the API client.
        if next(iter(inspect.signature(publisher.SlicePublisher).parameters)) == "client":
            kube = importlib.import_module("dra_driver.kube.client")
            slices = publisher.SlicePublisher(kube.Client(api_client=api_client), NODE, DRIVER)
        else:
            slices = publisher.SlicePublisher(api_client, NODE, DRIVER)
        if "reader" in inspect.signature(publishing.compute_pool).parameters:  # this tree reads NVML incrementally
            reader = publisher.InventoryReader()
            loop = publisher.PublishLoop(slices, lambda: publishing.compute_pool(nvml, None, reader), 60)
        else:
            loop = publisher.PublishLoop(slices, lambda: publishing.compute_pool(nvml, None), 60)
        loop.publish_now()
        pool = api_client.rest_client.pool_manager
        selector = f"fieldSelector=spec.nodeName%3D{NODE}%2Cspec.driver%3D{DRIVER}"
        url = f"{configuration.host}/apis/resource.k8s.io/v1/resourceslices?{selector}"
        headers = {"Accept": "application/json"}
        pool.request("GET", url, headers=headers)
        out: dict[str, Any] = {"rescan": [], "list": [], "writes": 0}
        for _ in range(runs):
            started = time.process_time()
            for _ in range(rescans):
                out["writes"] += loop.publish_now().writes
            out["rescan"].append((time.process_time() - started) / rescans)
            started = time.process_time()
            for _ in range(rescans):
                answer = pool.request("GET", url, headers=headers)
                if answer.status != 200 or not answer.data:
                    raise SystemExit(f"the LIST failed: {answer.status}")
            out["list"].append((time.process_time() - started) / rescans)
    print(json.dumps(out))


def measure_rescan(report: Report, tree: Path, runs: int, rescans: int, kubeconfig: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="migdra-bench-") as directory:
        argv = [sys.executable, __file__, "--rescan-worker", "--kubeconfig", str(kubeconfig)]
        argv += ["--runs", str(runs), "--rescans", str(rescans), "--state", str(Path(directory) / "nvml.json")]
        done = subprocess.run(argv, env=_env(tree), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"the rescan worker failed:\n{done.stderr}")
    measured = json.loads(done.stdout.strip().splitlines()[-1])
    if measured["writes"]:
        raise SystemExit(f"an unchanged rescan wrote {measured['writes']} times: not an idle rescan")
    table = report.table(
        "rescan",
        f"Idle rescan of an unchanged {SIM_GPUS} node (CPU time per round, median (min-max) of {runs} runs "
        f"of {rescans} rounds)",
        ["round", "CPU time", "x the LIST alone"],
    )
    table.add(
        "baseline: LIST of the node's slices, raw bytes, same connection",
        summary([v * 1000 for v in measured["list"]], "ms", 2),
        summary([1.0] * runs, "x", 2),
    )
    table.add(
        "plugin: rescan (NVML, pool, LIST, compare; 0 writes)",
        summary([v * 1000 for v in measured["rescan"]], "ms", 2),
        summary(ratios(measured["rescan"], measured["list"]), "x", 2),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    add_common_arguments(parser)
    parser.add_argument("--tree", type=Path, default=REPO, help="the migdra source tree to measure [this checkout]")
    parser.add_argument("--rescans", type=int, default=20, help="idle rescans per run [20]")
    parser.add_argument("--only", choices=("startup", "rescan"), help="measure only one of the two")
    parser.add_argument("--rescan-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--state", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rescan_worker:
        rescan_worker(args.kubeconfig, args.runs, args.rescans, args.state)
        return
    check_runs(parser, args)
    tree = args.tree.resolve()
    with Report("plugin", args, {"sim_gpus": SIM_GPUS, "rescans": args.rescans, "tree": str(tree)}) as report:
        root = Path(tempfile.mkdtemp(prefix="migdra-bench-api-"))
        try:
            with api_server(root) as (url, kubeconfig):
                if args.only != "rescan":
                    measure_start_up(report, tree, args.runs, url, kubeconfig)
                if args.only != "startup":
                    measure_rescan(report, tree, args.runs, args.rescans, kubeconfig)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    report.note(
        "Start-up: wall time from the process's start to the kubelet registration socket, and to the line the "
        "plugin prints after its first publish; the floors are processes that only import what a Python DRA "
        "plugin must. Idle rescan: `time.process_time` of the plugin's publish round in a worker process (the "
        "API server runs in its own), beside the raw LIST alone."
    )
    report.finish()


if __name__ == "__main__":
    main()
