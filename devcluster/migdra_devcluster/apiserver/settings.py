"""Settings of the local API server, one group, each field with its unit.

Built once (from ``migdra sim apiserver`` flags and ``MIGDRA_APISERVER_*`` variables, or from keyword
arguments of :class:`LocalAPIServer`) and passed to what needs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class ApiServerSettings(BaseSettings):
    """How the local API server listens, persists and paces watches."""

    model_config = SettingsConfigDict(env_prefix="MIGDRA_APISERVER_", extra="forbid", frozen=True)

    host: str = Field(default="127.0.0.1", description="address to listen on; loopback only by design")
    port: int = Field(default=0, ge=0, le=65535, description="TCP port; 0 picks a free one")
    snapshot: Path | None = Field(default=None, description="JSON file loaded at start and written at stop")
    snapshot_interval: float = Field(default=5.0, gt=0, description="seconds between snapshot writes (when changed)")
    token_file: Path | None = Field(
        default=None, description="static token file 'token,user,uid[,groups]'; unset = no authentication"
    )
    authorization: Literal["AlwaysAllow", "RBAC"] = Field(
        default="AlwaysAllow",
        description="AlwaysAllow: every authenticated request may do anything; RBAC: the stored ClusterRoles, "
        "Roles and bindings decide (members of system:masters may do anything); needs a token file",
    )
    tls: bool | None = Field(
        default=None,
        description="serve HTTPS with a fresh self-signed CA; default: on exactly when a token file is given "
        "(kubectl never sends a token over plain HTTP)",
    )
    history_limit: int = Field(
        default=10_000, ge=10, description="events kept for watch resumption; older versions answer 410 Expired"
    )
    bookmark_interval: float = Field(
        default=5.0, gt=0, description="seconds between BOOKMARK events on watches that allow them"
    )
    watch_max_pending: int = Field(
        default=10_000, ge=1, description="events a watch may fall behind before it is dropped with 410"
    )
    gc_interval: float = Field(default=1.0, gt=0, description="seconds between garbage-collection passes at most")

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not value.strip() or any(c.isspace() or c in "/[]" for c in value):
            raise ValueError("expected an IP address or host name of this machine, e.g. 127.0.0.1")
        return value

    @model_validator(mode="after")
    def _authorization_needs_users(self) -> ApiServerSettings:
        if self.authorization == "RBAC" and self.token_file is None:
            raise ValueError(
                "authorization RBAC needs a token file (MIGDRA_APISERVER_TOKEN_FILE): without users, "
                "every request would be the anonymous user's"
            )
        return self
