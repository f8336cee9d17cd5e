"""Settings of ``migdra controller`` (flags or ``MIGDRA_CONTROLLER_*`` variables), built once at start-up."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from dra_driver.devicemodel.naming import check_driver_name, dns_label_problem, dns_subdomain_problem
from dra_driver.devicemodel.vocabulary import DEFAULT_DRIVER_NAME
from dra_driver.flags import flag
from dra_driver.serving import parse_metrics_address


def _default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


class ControllerSettings(BaseSettings):
    """The reservation controller's settings; every duration in seconds."""

    model_config = SettingsConfigDict(env_prefix="MIGDRA_CONTROLLER_", extra="forbid", frozen=True)

    driver_name: str = Field(
        default=DEFAULT_DRIVER_NAME, description="DRA driver name whose claims are reserved", json_schema_extra=flag()
    )
    kubeconfig: Path | None = Field(
        default=None, description="kubeconfig file; in-cluster config when unset", json_schema_extra=flag(path="file")
    )
    leader_elect: bool = Field(
        default=True, description="compete for a Lease; only the holder writes", json_schema_extra=flag()
    )
    lease_namespace: str = Field(
        default="kube-system", description="namespace of the leader-election Lease", json_schema_extra=flag()
    )
    lease_name: str = Field(
        default="", description="the Lease's name; default <driver name>-controller", json_schema_extra=flag()
    )
    identity: str = Field(
        default="",
        description="this replica's Lease holder identity; default <host name>_<pid>",
        json_schema_extra=flag(),
    )
    lease_duration: float = Field(
        default=15.0, gt=0, description="seconds a Lease is held without renewal", json_schema_extra=flag()
    )
    renew_deadline: float = Field(
        default=10.0, gt=0, description="seconds the leader may fail to renew", json_schema_extra=flag()
    )
    retry_period: float = Field(
        default=2.0, gt=0, description="seconds between attempts to acquire or renew", json_schema_extra=flag()
    )
    resync_interval: float = Field(
        default=60.0,
        gt=0,
        description="seconds between full passes over every claim without a change",
        json_schema_extra=flag(),
    )
    write_qps: float = Field(
        default=20.0, gt=0, description="claim status writes per second, at most", json_schema_extra=flag()
    )
    write_burst: int = Field(
        default=50, ge=1, description="claim status writes allowed at once before the rate", json_schema_extra=flag()
    )
    metrics_address: str | None = Field(
        default=None,
        description="serve Prometheus metrics on HOST:PORT (e.g. 0.0.0.0:9401); off when unset",
        json_schema_extra=flag(metavar="HOST:PORT"),
    )

    @field_validator("driver_name")
    @classmethod
    def _driver_name(cls, value: str) -> str:
        return check_driver_name(value)

    @field_validator("lease_namespace")
    @classmethod
    def _lease_namespace(cls, value: str) -> str:
        problem = dns_label_problem(value)
        if problem is not None:
            raise ValueError(f"not a namespace name: it {problem}")
        return value

    @field_validator("lease_name")
    @classmethod
    def _lease_name(cls, value: str) -> str:
        problem = dns_subdomain_problem(value, 253) if value else None
        if problem is not None:
            raise ValueError(f"not a Lease name: it {problem}")
        return value

    @field_validator("metrics_address")
    @classmethod
    def _metrics_address(cls, value: str | None) -> str | None:
        if value is not None:
            parse_metrics_address(value)
        return value

    @model_validator(mode="after")
    def _lease_timing(self) -> ControllerSettings:
        if not self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                f"leader election needs --retry-period ({self.retry_period:g} s) < --renew-deadline "
                f"({self.renew_deadline:g} s) < --lease-duration ({self.lease_duration:g} s)"
            )
        return self

    @property
    def holder_identity(self) -> str:
        return self.identity or _default_identity()

    @property
    def lease(self) -> str:
        return self.lease_name or f"{self.driver_name}-controller"
