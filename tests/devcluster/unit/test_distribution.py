"""The development cluster as a distribution of its own: migdra's version, pinned both ways, and
`migdra sim` reaching its commands through the entry point the product looks up."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import click

from dra_driver import __version__
from dra_driver.cli.lazy import ENTRY_POINT_GROUP
from dra_driver.cli.main import cli
from migdra_devcluster.cli import sim

REPO = Path(__file__).resolve().parents[3]


def _project(path: Path) -> dict[str, object]:
    project: dict[str, object] = tomllib.loads(path.read_text())["project"]
    return project


def test_both_distributions_carry_one_version_and_pin_each_other_to_it() -> None:
    product = _project(REPO / "pyproject.toml")
    devcluster = _project(REPO / "devcluster" / "pyproject.toml")
    assert product["version"] == devcluster["version"] == __version__
    assert f"migdra=={__version__}" in devcluster["dependencies"]  # type: ignore[operator]
    assert f"migdra-devcluster=={__version__}" in product["optional-dependencies"]["dev"]  # type: ignore[index]


def test_migdra_sim_is_the_development_clusters_group_found_by_entry_point() -> None:
    (entry,) = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name="sim")
    assert entry.value == "migdra_devcluster.cli:sim"
    assert entry.dist is not None
    assert entry.dist.name == "migdra-devcluster"
    assert entry.load() is sim
    assert cli.get_command(click.Context(cli), "sim") is sim
    assert set(sim.list_commands(click.Context(sim))) == {"down", "roll", "up", "xid"}
