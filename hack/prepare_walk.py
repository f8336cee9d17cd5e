#!/usr/bin/env python3
"""Frames and files of a prepare of each kind of device, for docs/architecture.md ("the house").

Prepares one claim of each kind -- exclusive MIG device, share of a shared GPU instance, whole GPU, admin
access -- on simulated GPUs with the real kube-apiserver (``make kube``), and records the Python stack
where that kind's prepare does its own work: NVML's GPU-instance creation (exclusive), the share's
compute-instance creation (share), the checkpoint lookup of the instance another claim made (admin
access), the claim's CDI spec (whole GPU: nothing else happens).  It prints, per kind, the frames of
migdra's code from ``PrepareService.prepare`` down (kubelet's gRPC servicer is one more frame above) and
the files they are in.  Run from a checkout's root: ``.venv/bin/python hack/prepare_walk.py``; the same
script in an older checkout measures the "before".
"""

from __future__ import annotations

import sys
import tempfile
import traceback
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path.cwd()
sys.path.insert(0, str(ROOT))

from kubeletplugin.prepare.checkpoint import CheckpointStore  # noqa: E402
from kubeletplugin.prepare.claim_files import ClaimFiles  # noqa: E402
from tests.kube_apiserver import kube_apiserver  # noqa: E402
from tests.prepare_harness import Node, result, simulated_node  # noqa: E402

OURS = ("kubeletplugin/", "dra_driver/")


def _our_frames(stack: list[traceback.FrameSummary]) -> list[str]:
    """migdra's frames from PrepareService.prepare down, as 'file:function'."""
    frames = [f for f in stack if any(part in f.filename for part in OURS)]
    start = next(i for i, f in enumerate(frames) if f.name == "prepare" and f.filename.endswith("service.py"))
    return [f"{Path(f.filename).relative_to(ROOT)}:{f.name}" for f in frames[start:]]


@contextmanager
def _spy(target: Any, method: str, seen: list[list[str]]) -> Iterator[None]:
    genuine: Callable[..., Any] = getattr(target, method)

    def spying(*args: Any, **kwargs: Any) -> Any:
        seen.append(_our_frames(traceback.extract_stack()[:-1]))
        return genuine(*args, **kwargs)

    setattr(target, method, spying)
    try:
        yield
    finally:
        setattr(target, method, genuine)


def _walk(node: Node, kind: str, results: list[dict[str, Any]], target: Any, method: str) -> list[str]:
    service = node.services[0] if node.services else node.service()
    seen: list[list[str]] = []
    with _spy(target, method, seen):
        ref = node.claim(f"walk-{kind}", results)
        outcome = service.prepare([ref])[ref.uid]
    assert outcome.error == "", outcome.error
    return seen[0]


def main() -> int:
    walks: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="migdra-walk-") as scratch, kube_apiserver(Path(scratch) / "api") as api:
        with simulated_node(Path(scratch) / "mig", ["H100-SXM5-80GB"], api=api) as node:
            walks["exclusive MIG device"] = _walk(
                node, "exclusive", [result("gpu-0-mig-1g20gb-15-4")], node.nvml, "create_gpu_instance"
            )
            share = result(
                "gpu-0-shared-4g40gb-5-0", shareID=str(uuid.uuid4()), consumedCapacity={"computeSlices": "1"}
            )
            walks["share of a shared GPU instance"] = _walk(
                node, "share", [share], node.nvml, "create_compute_instance_at"
            )
            walks["admin access"] = _walk(
                node, "admin", [result("gpu-0-mig-1g20gb-15-4", adminAccess=True)], CheckpointStore, "find_owner"
            )
        with simulated_node(Path(scratch) / "whole", ["A100-SXM4-40GB"], api=api, mig_enabled=False) as node:
            walks["whole GPU"] = _walk(node, "whole", [result("gpu-0")], ClaimFiles, "write")
    for kind, frames in walks.items():
        files = sorted({frame.split(":")[0] for frame in frames})
        print(f"{kind}: {len(frames) + 1} frames (with the gRPC servicer) in {len(files) + 1} files")
        for frame in frames:
            print(f"    {frame}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
