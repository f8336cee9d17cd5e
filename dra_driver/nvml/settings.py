"""Which NVML library the hardware boundary talks to: the ``MIGDRA_NVML`` / ``MIGDRA_SIM_*`` settings.

A settings group of its own (every group follows the rules in docs/architecture.md, "Settings"), kept
beside the NVML layer that reads it so that :mod:`dra_driver.nvml.session` needs nothing above it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from dra_driver.errors import build_settings
from dra_driver.flags import flag
from dra_driver.mig.catalog import load_catalog

# Most GPUs one simulated node holds: far beyond any server, small enough to start in a moment.
MAX_SIM_GPUS = 64


def parse_sim_gpus(value: object) -> tuple[str, ...]:
    """``"H100-SXM5-80GB:8,A100-SXM4-40GB"`` -> eight H100 keys then one A100 key, in that order.

    The count after ``:`` defaults to 1; model names are catalog keys or aliases and are normalised
    to catalog keys, so a typo fails here with the list of known models.
    """
    if value is None or value == "":
        return ()
    items: list[str]
    if isinstance(value, str):
        items = [part.strip() for part in value.split(",")]
    elif isinstance(value, (list, tuple)):
        items = [str(v).strip() for v in value]
    else:
        raise ValueError(f"expected 'MODEL[:COUNT],...', got {value!r}")
    catalog = load_catalog()
    gpus: list[str] = []
    for position, item in enumerate(items, start=1):
        if not item:
            raise ValueError(f"entry {position} is empty; expected 'MODEL[:COUNT],...', e.g. H100-SXM5-80GB:8")
        model, _, count_text = item.partition(":")
        try:
            count = int(count_text) if count_text else 1
        except ValueError:
            raise ValueError(f"{item!r}: the count after ':' must be an integer") from None
        if not 1 <= count <= MAX_SIM_GPUS:
            raise ValueError(f"{item!r}: the count must be between 1 and {MAX_SIM_GPUS}")
        try:
            key = catalog.model(model).key
        except KeyError as exc:
            raise ValueError(str(exc.args[0])) from None
        gpus.extend([key] * count)
    if len(gpus) > MAX_SIM_GPUS:
        raise ValueError(f"{len(gpus)} GPUs in all; a simulated node holds at most {MAX_SIM_GPUS}")
    return tuple(gpus)


class NvmlSettings(BaseSettings):
    """Which NVML library the hardware boundary talks to."""

    # An empty variable (`MIGDRA_SIM_STATE=`) means unset, as for most tools; an empty flag is refused.
    model_config = SettingsConfigDict(env_prefix="MIGDRA_", extra="forbid", frozen=True, env_ignore_empty=True)

    nvml: Literal["real", "simulated"] = Field(
        default="real",
        description="'real': libnvidia-ml.so.1 through pynvml; 'simulated': the MIG simulator beneath pynvml",
        json_schema_extra=flag(),
    )
    sim_state: Path | None = Field(
        default=None,
        description="state file of the simulated hardware (created if absent); unset: a throw-away node that "
        "lives as long as the process",
        json_schema_extra=flag(path="file"),
    )
    sim_gpus: Annotated[tuple[str, ...], NoDecode, BeforeValidator(parse_sim_gpus)] = Field(
        default=(),
        description="simulated GPUs, 'MODEL[:COUNT],...' (catalog keys): creates a new state file; an existing "
        "one must hold the same models",
        json_schema_extra=flag(metavar="MODEL[:N],..."),
    )
    sim_mig_enabled: bool = Field(
        default=True,
        description="start simulated GPUs with MIG mode enabled",
        json_schema_extra=flag(off="--sim-mig-disabled"),
    )
    sim_faults: str | None = Field(
        default=None,
        description="a JSON fault plan for the simulator (docs/simulated-nvml.md), for tests and demos; "
        "validated when the simulator is installed, ignored with real NVML",
    )

    sim_latency_profile: Path | None = Field(
        default=None,
        description="a recording of a real GPU (migdra hw record --latency-samples N) whose read-only NVML "
        "latencies (p50) the simulator then takes; calls it did not time take none, and MIGDRA_SIM_FAULTS "
        "latency wins (docs/simulated-nvml.md); ignored with real NVML",
    )

    @field_validator("sim_latency_profile")
    @classmethod
    def _a_latency_recording(cls, value: Path | None) -> Path | None:
        """Refuse a missing or malformed recording now, in one line naming the variable, rather than
        when the simulator is installed (in a plugin, after start-up has begun)."""
        if value is None:
            return None
        path = value.expanduser().absolute()
        from dra_driver.nvml.sim.latency import recorded_latency  # noqa: PLC0415 -- the simulator only when asked

        recorded_latency(path)  # a LatencyProfileError is a ValueError: pydantic reports it for the variable
        return path

    @field_validator("sim_state")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        return value.expanduser().absolute() if value is not None else None

    @field_validator("sim_state", mode="before")
    @classmethod
    def _not_empty(cls, value: object) -> object:
        if isinstance(value, (str, Path)) and not str(value).strip():  # Path("") is ".": the current directory
            raise ValueError("is empty; give the path of a state file, e.g. ./node.json")
        return value

    @model_validator(mode="before")
    @classmethod
    def _simulated_gpus_imply_the_simulator(cls, data: object) -> object:
        """``--sim-gpus`` or ``--sim-state`` alone means the simulator: nobody asks for simulated GPUs on
        real NVML."""
        if isinstance(data, dict) and (data.get("sim_gpus") or data.get("sim_state")) and "nvml" not in data:
            return {**data, "nvml": "simulated"}
        return data

    @model_validator(mode="after")
    def _simulated_needs_hardware(self) -> NvmlSettings:
        if self.nvml == "simulated" and self.sim_state is None and not self.sim_gpus:
            raise ValueError(
                "--nvml simulated needs --sim-gpus (MIGDRA_SIM_GPUS) for a throw-away node, "
                "or --sim-state (MIGDRA_SIM_STATE) for a persistent one"
            )
        if self.nvml == "real":
            # A simulator flag beside real NVML is a mistake either way round; ignoring one would run
            # on the wrong hardware without a word.
            simulator_flags = [
                flag
                for flag, given in (
                    ("--sim-gpus (MIGDRA_SIM_GPUS)", bool(self.sim_gpus)),
                    ("--sim-state (MIGDRA_SIM_STATE)", self.sim_state is not None),
                )
                if given
            ]
            if simulator_flags:
                raise ValueError(
                    f"--nvml real (MIGDRA_NVML) cannot be combined with {' or '.join(simulator_flags)}: "
                    "drop --nvml real to use the simulator, or the simulator flags to use the GPUs"
                )
            if "sim_mig_enabled" in self.model_fields_set:
                flag = "--sim-mig-enabled" if self.sim_mig_enabled else "--sim-mig-disabled"
                raise ValueError(
                    f"{flag} (MIGDRA_SIM_MIG_ENABLED) applies only to the simulator: add --sim-gpus MODEL:N "
                    "or --sim-state PATH, or drop it"
                )
        return self


def build_nvml_settings(**overrides: object) -> NvmlSettings:
    """Environment plus explicit overrides (``None`` means 'not given'); errors name the flag or variable."""
    return build_settings(NvmlSettings, "NVML", overrides)
