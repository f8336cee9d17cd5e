"""``migdra hw``: record what NVML answers about MIG (read-only), and check the simulator against it.

Presentation only: the probe is :mod:`dra_driver.nvml.recording`, the comparison
:mod:`dra_driver.nvml.sim.replay`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from dra_driver.cli.options import nvml_options
from dra_driver.errors import ConfigurationError, MigdraError


class RecordingMismatch(MigdraError):
    """The simulator answered differently from the recorded hardware."""


@click.group()
def hw() -> None:
    """Record what real NVML answers (read-only); check the simulator."""


@hw.command()
@nvml_options
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="write the recording to this file [default: standard output]",
)
@click.option(
    "--latency-samples",
    type=click.IntRange(0, 100_000),
    default=200,
    show_default=True,
    help="time each read-only query this many times (0: no latency table)",
)
def record(
    nvml: str | None,
    sim_state: str | None,
    sim_gpus: str | None,
    sim_mig_enabled: bool | None,
    output: Path | None,
    latency_samples: int,
) -> None:
    """Record, READ-ONLY, what NVML answers about this node's MIG: a JSON file to contribute.

    \b
    Queries every GPU-instance profile index of every GPU (profile info, possible placements,
    remaining capacity, instances listed), the MIG mode and the instances present, and times the
    read-only queries.  It NEVER changes the MIG mode and NEVER creates or destroys GPU or compute
    instances, so it is safe on a node in use.  GPU and MIG UUIDs and PCI bus IDs are left out.
    Needs the NVIDIA driver (libnvidia-ml.so.1); `migdra hw replay FILE` then shows whether
    migdra's simulator agrees with your GPU.
    """
    from dra_driver.durable import write_file_atomically  # noqa: PLC0415 -- keep `migdra --help` light
    from dra_driver.nvml.recording import record_node  # noqa: PLC0415
    from dra_driver.nvml.session import open_nvml  # noqa: PLC0415
    from dra_driver.nvml.settings import build_nvml_settings  # noqa: PLC0415

    if output is not None and not output.parent.is_dir():
        raise ConfigurationError(f"--output {output}: directory {output.parent} does not exist")
    settings = build_nvml_settings(nvml=nvml, sim_state=sim_state, sim_gpus=sim_gpus, sim_mig_enabled=sim_mig_enabled)
    started = time.perf_counter()
    with open_nvml(settings) as session:
        init_ms = (time.perf_counter() - started) * 1000
        document = record_node(session, latency_repeats=latency_samples, init_ms=init_ms)
    text = json.dumps(document, indent=1) + "\n"
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        write_file_atomically(output, text.encode())
    except OSError as exc:
        raise ConfigurationError(f"--output {output}: cannot write: {exc.strerror or exc}") from exc
    gpus = document["nvml"]["gpus"]
    click.echo(f"recorded {len(gpus)} GPU(s) ({', '.join(g['name'] for g in gpus)}) to {output}", err=True)


@hw.command()
@click.argument("recordings", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
def replay(recordings: tuple[Path, ...]) -> None:
    """Configure the simulator as each RECORDING describes its hardware, and list every disagreement.

    Exit status 1 if the simulator answers any recorded field differently.
    """
    from dra_driver.nvml.sim.replay import compare_with_simulator  # noqa: PLC0415

    disagreeing = []
    for path in recordings:
        problems = compare_with_simulator(_read_recording(path), str(path))
        if problems:
            disagreeing.append(path)
            click.echo(f"{path}: the simulator disagrees on {len(problems)} field(s):")
            for problem in problems:
                click.echo(f"  {problem}")
        else:
            click.echo(f"{path}: the simulator answers as recorded")
    if disagreeing:
        raise RecordingMismatch(f"the simulator disagrees with {', '.join(str(p) for p in disagreeing)}")


def _read_recording(path: Path) -> dict[str, object]:
    from pydantic import ValidationError  # noqa: PLC0415

    from dra_driver.nvml.recording import Recording  # noqa: PLC0415

    try:
        document = json.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigurationError(f"recording {path}: cannot read: {exc.strerror or exc}") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"recording {path}: not JSON ({exc})") from exc
    try:
        Recording.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ConfigurationError(f"recording {path}: {where}: {first['msg']} (not a migdra hw record file)") from exc
    if not isinstance(document, dict):
        raise ConfigurationError(f"recording {path}: expected a JSON object")
    return document
