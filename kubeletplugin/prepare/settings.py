"""Settings of the prepare path (flags of ``migdra kubelet-plugin`` or ``MIGDRA_*`` variables).

Built once at start-up by the node process and passed to :class:`~kubeletplugin.prepare.service.
PrepareService` explicitly; nothing in the prepare package reads the environment itself.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from kubeletplugin.prepare.crashpoints import CrashPoint


class PrepareSettings(BaseSettings):
    """Where prepare keeps its files, how much it does at once, and the test-only crash point."""

    model_config = SettingsConfigDict(env_prefix="MIGDRA_", extra="forbid", frozen=True)

    cdi_dir: Path = Field(default=Path("/var/run/cdi"), description="directory of the per-claim CDI spec files")
    state_dir: Path = Field(
        default=Path("/var/lib/kubelet/plugins/gpu.migdra.io"),
        description="directory of the checkpoint (checkpoint.json), its lock (prepare.lock) and the claim and GPU "
        "lock files (locks/); shared by the two plugin pods of a rolling update",
    )
    device_metadata: bool = Field(
        default=True,
        description="write each prepared request's KEP-5304 device metadata file (the device's published "
        "attributes, MIG UUID, GI/CI IDs) and bind-mount it into the container through the claim's CDI spec "
        "at /var/run/kubernetes.io/dra-device-attributes/...; off: neither files nor mounts",
    )
    plugin_data_dir: Path = Field(
        default=Path("/var/lib/kubelet/plugins/gpu.migdra.io"),
        description="directory under which the device metadata files are written (dra-device-metadata/); the "
        "path must be the same on the host, since the container runtime bind-mounts from it; default: the "
        "plugin directory (--plugin-dir)",
    )
    proc_root: Path = Field(
        default=Path("/proc"), description="procfs root for the NVIDIA capability files and /proc/devices"
    )
    prepare_workers: int = Field(
        default=64,
        ge=1,
        le=256,
        description="claims of one request prepared / unprepared concurrently (threads; a one-claim request "
        "runs in kubelet's gRPC call thread instead). A thread waits on its GPU's lock, so fewer threads than "
        "the claims of one request would queue claims of idle GPUs behind a busy one",
    )
    state_lock_timeout: float = Field(
        default=30.0,
        ge=0,
        description="seconds to wait for a lock of the state directory (the checkpoint's, a claim's, a GPU's) that "
        "another thread or plugin process holds; then that claim fails and kubelet retries it (at start-up: the "
        "plugin stops)",
    )
    api_timeout: float = Field(default=10.0, gt=0, description="seconds per API server request")
    test_crash_at: CrashPoint | None = Field(
        default=None, description="TESTS ONLY: SIGKILL this process at that point of prepare"
    )
