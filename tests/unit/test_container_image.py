"""The container image's recipe (no image builder runs here: `make image` needs docker and a registry).

What can be checked without building: the base is pinned to an exact release, the image runs as a
non-root user unless the chart says otherwise, its entry point is the `migdra` command the chart's
`args` extend, the build context holds everything the installed package reads at run time, and neither
the wheel nor the image holds the development cluster (``devcluster/``: what the Helm chart runs is all
they hold).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from hatchling.builders.wheel import WheelBuilder

REPO = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = {"dra_driver", "kubeletplugin"}
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
    # the data files the running code reads (the MIG catalog; the DeviceClasses `migdra plan` and
    # `migdra bench placement` allocate against) live inside a package
    assert (REPO / "dra_driver" / "mig" / "data" / "mig-catalog.yaml").is_file()
    assert (REPO / "dra_driver" / "data" / "deviceclasses" / "mig.migdra.io.yaml").is_file()
    packaged = re.search(r"packages = \[(.*?)\]", (REPO / "pyproject.toml").read_text())
    assert packaged is not None
    assert set(re.findall(r'"([^"]+)"', packaged.group(1))) == {"dra_driver", "kubeletplugin"}


def _wheel_files() -> dict[str, Path]:
    """The product wheel's files (path in the wheel -> source), as the build backend selects them for
    ``pip wheel .`` (and the image's ``pip install .``), without writing a wheel."""
    return {item.distribution_path: Path(item.path) for item in WheelBuilder(str(REPO)).recurse_included_files()}


def test_the_product_wheel_holds_no_development_cluster_code() -> None:
    wheel = _wheel_files()
    assert {path.split("/", 1)[0] for path in wheel} == PRODUCT_PACKAGES
    assert "dra_driver/nvml/sim/__init__.py" in wheel  # the NVML simulator is product (`--sim-gpus`)
    assert "dra_driver/tools/validation/__init__.py" in wheel  # and the validation `migdra allocate` runs
    assert "dra_driver/data/deviceclasses/mig-shared.migdra.io.yaml" in wheel  # and `migdra plan`'s classes
    sources = {path: source.read_bytes() for path, source in wheel.items() if path.endswith(".py")}
    assert sorted(path for path, text in sources.items() if b"migdra_devcluster" in text) == []
    # No module of the development cluster was copied back in under another name.
    dev_modules = {
        hashlib.sha256(module.read_bytes()).hexdigest(): module.relative_to(REPO).as_posix()
        for module in (REPO / "devcluster" / "migdra_devcluster").rglob("*.py")
        if module.stat().st_size > 0
    }
    assert len(dev_modules) > 15  # the tree was found
    copies = {
        path: dev_modules[digest]
        for path, text in sources.items()
        if (digest := hashlib.sha256(text).hexdigest()) in dev_modules
    }
    assert copies == {}


def test_the_image_copies_only_the_product_packages() -> None:
    # The context holds the product alone (so not devcluster/), the build stage copies the product alone and
    # installs it with `pip install .` (no extras), and the final stage takes only that virtual environment.
    allowed = {
        line[1:].rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines() if line.startswith("!")
    }
    assert allowed == {"pyproject.toml", "README.md", *PRODUCT_PACKAGES}
    copied = {
        source
        for line in re.findall(r"^COPY (?!--from)(.+)$", DOCKERFILE, re.MULTILINE)
        for source in line.split()[:-1]
    }
    assert copied == {"pyproject.toml", "README.md", *PRODUCT_PACKAGES}
    assert re.search(r"/opt/migdra/bin/pip install --no-cache-dir \.\s", DOCKERFILE)
    assert "[dev]" not in DOCKERFILE
