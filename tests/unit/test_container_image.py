"""The container image's recipe (no image builder runs here: `make image` needs docker and a registry).

What can be checked without building: the base is pinned to an exact release, the image runs as a
non-root user unless the chart says otherwise, its entry point is the `migdra` command the chart's
`args` extend, and the build context holds everything the installed package reads at run time.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "Dockerfile").read_text()


def test_the_base_image_is_an_exact_python_release() -> None:
    (base,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE, re.MULTILINE)
    assert re.fullmatch(r"python:3\.1[1-9]\.\d+-slim-(bookworm|trixie)(@sha256:[0-9a-f]{64})?", base), base
    assert DOCKERFILE.count("FROM ${PYTHON_IMAGE}") == 2  # build and run stages on the same base


def test_the_image_runs_migdra_as_a_non_root_user() -> None:
    final_stage = DOCKERFILE.rsplit("FROM ", 1)[1]
    (user,) = re.findall(r"^USER (\d+):(\d+)$", final_stage, re.MULTILINE)
    assert int(user[0]) != 0
    assert int(user[1]) != 0
    assert 'ENTRYPOINT ["migdra"]' in final_stage
    assert "COPY --from=build /opt/migdra /opt/migdra" in final_stage


def test_the_build_context_has_what_the_package_reads_at_run_time() -> None:
    allowed = {
        line[1:].rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines() if line.startswith("!")
    }
    assert {"pyproject.toml", "README.md", "dra_driver", "kubeletplugin"} <= allowed
    # the one data file the running code reads (the MIG catalog) lives inside a package
    assert (REPO / "dra_driver" / "mig" / "data" / "mig-catalog.yaml").is_file()
    packaged = re.search(r"packages = \[(.*?)\]", (REPO / "pyproject.toml").read_text())
    assert packaged is not None
    assert set(re.findall(r'"([^"]+)"', packaged.group(1))) == {"dra_driver", "kubeletplugin"}
