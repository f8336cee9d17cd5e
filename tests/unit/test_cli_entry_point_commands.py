"""`migdra sim` without the development cluster: the product lists the command (its help needs no
lookup) and, where no distribution provides it, says in one line how to install it."""

from __future__ import annotations

import importlib.metadata
import sys

import pytest

from dra_driver.cli import lazy
from dra_driver.cli.main import cli, main


@pytest.fixture
def entry_point_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """No distribution provides a ``migdra.commands`` entry point (as where only the product is
    installed), ``migdra sim`` not loaded yet; the names looked up, in order."""
    looked_up: list[str] = []

    def entry_points(*, group: str, name: str) -> importlib.metadata.EntryPoints:
        assert group == lazy.ENTRY_POINT_GROUP
        looked_up.append(name)
        return importlib.metadata.EntryPoints([])

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    entry_point_commands = {"sim", "kubelet-plugin", "health"}
    monkeypatch.setattr(cli, "commands", {n: c for n, c in cli.commands.items() if n not in entry_point_commands})
    return looked_up


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["sim", "up", "--workdir", "/tmp/sim"], id="sim-up"),
        pytest.param(["sim", "apiserver", "--kubeconfig-out", "/tmp/kubeconfig"], id="sim-apiserver"),
        pytest.param(["sim", "--help"], id="sim-help"),
    ],
)
def test_sim_without_the_development_cluster_is_one_line_saying_how_to_install_it(
    argv: list[str], entry_point_lookups: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["migdra", *argv])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2  # a usage error: this installation cannot run the command
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "migdra: error: migdra sim: the development cluster (package migdra-devcluster) is not installed; "
        "pip install 'migdra[dev]' installs it (in a source checkout: make install)"
    ]
    assert entry_point_lookups == ["sim"]


def test_the_help_lists_sim_without_looking_for_it(
    entry_point_lookups: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["migdra", "--help"])
    main()  # returns: help is no error
    assert "  sim  " in capsys.readouterr().out
    assert entry_point_lookups == []


@pytest.mark.parametrize("argv", [[], ["cel"]], ids=["migdra", "migdra-cel"])
def test_a_command_group_alone_prints_its_help_not_an_error_line(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["migdra", *argv])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2  # no command ran
    out, err = capsys.readouterr()
    assert err == ""
    assert out.startswith(f"Usage: migdra {' '.join(argv)}".rstrip() + " [OPTIONS] COMMAND [ARGS]...")
    assert "\nCommands:\n" in out


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["kubelet-plugin", "--node-name", "n1"], id="kubelet-plugin"),
        pytest.param(["health", "list", "--state-dir", "/tmp"], id="health"),
    ],
)
def test_the_node_plugins_commands_missing_are_one_line(
    argv: list[str], entry_point_lookups: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The node plugin's own commands come by entry point too (the library never imports the node plugin): an
    installation whose entry points are missing says so in one line, naming the command, without a traceback."""
    monkeypatch.setattr(sys, "argv", ["migdra", *argv])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"migdra: error: migdra {argv[0]}: the node plugin (package kubeletplugin) is not installed with this "
        "migdra; reinstall it"
    ]
    assert entry_point_lookups == [argv[0]]


def test_the_help_lists_the_node_plugins_commands_without_looking_for_them(
    entry_point_lookups: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["migdra", "--help"])
    main()
    out = capsys.readouterr().out
    assert "  kubelet-plugin  " in out
    assert "  health  " in out
    assert entry_point_lookups == []
