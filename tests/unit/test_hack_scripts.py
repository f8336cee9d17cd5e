"""The end-to-end script for kind names what really exists.

hack/e2e-kind.sh needs docker, kind and registry access, which these machines lack, so it never runs
here; what can be checked is that it is correct shell (tests/integration/test_shellcheck.py) and that
every repository path, value file, chart value and demo name it relies on is real.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = [*sorted((REPO / "hack").glob("**/*.sh")), REPO / ".ci" / "run"]
E2E_KIND = (REPO / "hack" / "e2e-kind.sh").read_text()


def test_the_kind_script_uses_paths_and_values_that_exist() -> None:
    for relative in re.findall(r'"\$REPO/([^"$]+)"', E2E_KIND):
        assert (REPO / relative.rstrip("/")).exists() or list(REPO.glob(relative)), relative
    assert (REPO / "helm" / "migdra" / "ci" / "simulated-values.yaml").is_file()
    values = yaml.safe_load((REPO / "helm" / "migdra" / "values.yaml").read_text())
    for dotted in re.findall(r'--set "?([a-zA-Z.]+)=', E2E_KIND):
        node = values
        for part in dotted.split("."):
            assert part in node, f"--set {dotted}: no such chart value"
            node = node[part]


def test_the_kind_script_knows_the_demos_unfit_pod() -> None:
    (unfit,) = re.findall(r'^UNFIT_POD="([^"]+)"', E2E_KIND, re.MULTILINE)
    pods = [
        doc["metadata"]["name"]
        for path in sorted((REPO / "demo").glob("0*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc["kind"] == "Pod"
    ]
    assert unfit in pods
    assert 'make -C "$REPO" image' in E2E_KIND  # the image target exists
    assert re.search(r"^image:", (REPO / "Makefile").read_text(), re.MULTILINE)
