"""Kubelet's plugin watcher and DRA plugin manager for one node: registration sockets in, clients out.

What kubelet does (``pkg/kubelet/pluginmanager`` and ``pkg/kubelet/cm/dra/plugin``), and so this does:

- a socket appearing in the registration directory is registered: GetInfo, the DRA handler's checks and
  version choice, NotifyRegistrationStatus (see :mod:`.pluginclient`).  A failed or refused attempt is
  tried again with backoff, as kubelet's reconciler keeps retrying sockets it could not register;
- a socket that disappears, or is replaced by a new file at the same path (a restarted plugin),
  deregisters the old instance; the new file is registered afresh;
- several instances of one driver may be registered at once (a rolling update:
  ``<driver>-<pod uid>-reg.sock``); calls go to the most recently registered one that is connected;
- when no instance of a driver has been connected for ``wipe_delay`` seconds (kubelet's
  ``defaultWipingDelay``, 30 s), ``on_wipe(driver)`` is called once: kubelet deletes the driver's
  ResourceSlices of the node, so the scheduler stops allocating devices nobody can prepare.

Why polling (every ``poll_interval``) instead of inotify: it needs no extra dependency, a registry
directory holds a handful of files, and 0.1 s is far below anything a test or a user notices.
"Connected" is checked by connecting to each instance's DRA socket (every ``probe_interval``): a
plugin killed with SIGKILL leaves its socket files behind, so a file's presence proves nothing.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from dra_driver.kube.failures import BackoffPolicy
from dra_driver.kube.informer import Changes
from migdra_devcluster.kubelet.pluginclient import (
    CALL_TIMEOUT_SECONDS,
    KNOWN_VERSIONS,
    PluginClient,
    RegistrationRejected,
    register,
)
from migdra_devcluster.kubelet.retries import RetryTracker

log = logging.getLogger(__name__)

DEFAULT_WIPE_DELAY_SECONDS = 30.0
"""Kubelet's ``defaultWipingDelay``."""

REGISTRATION_TIMEOUT_SECONDS = 5.0
"""How long GetInfo / NotifyRegistrationStatus may take before the attempt is retried later."""

_REGISTRATION_BACKOFF = BackoffPolicy(initial=0.1, maximum=2.0)
_WIPE_BACKOFF = BackoffPolicy(initial=0.5, maximum=10.0)
_PROBE_TIMEOUT_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class SocketIdentity:
    """Which file sits at a path: a plugin restarted in between polls leaves a different one."""

    path: Path
    inode: int
    changed_ns: int


@dataclass
class PluginInstance:
    """One registered plugin instance (one registration socket)."""

    identity: SocketIdentity
    client: PluginClient
    sequence: int
    connected: bool = True
    registered_at: float = field(default_factory=time.monotonic)

    @property
    def driver(self) -> str:
        return self.client.driver


def _socket_identities(directory: Path) -> dict[Path, SocketIdentity]:
    """The unix sockets in ``directory`` (hidden files ignored, as kubelet does); none if it is missing."""
    found: dict[Path, SocketIdentity] = {}
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return found
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISSOCK(info.st_mode):
            path = Path(entry.path)
            found[path] = SocketIdentity(path, info.st_ino, info.st_ctime_ns)
    return found


def _accepts_connections(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(_PROBE_TIMEOUT_SECONDS)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


class PluginWatcher:
    """Registers the DRA plugins of one node's registration directory; one background thread.

    ``changes`` (optional) is bumped whenever the set of usable plugins changes, so a level-triggered
    consumer (the kubelet's sync loop) looks again; ``on_wipe(driver)`` deletes a driver's slices
    after it stayed away ``wipe_delay`` seconds (an exception makes it retry with backoff).
    """

    def __init__(
        self,
        registry_dir: Path,
        *,
        known_versions: Sequence[str] = KNOWN_VERSIONS,
        wipe_delay: float = DEFAULT_WIPE_DELAY_SECONDS,
        on_wipe: Callable[[str], None] | None = None,
        changes: Changes | None = None,
        poll_interval: float = 0.1,
        probe_interval: float = 0.5,
        call_timeout: float = CALL_TIMEOUT_SECONDS,
    ) -> None:
        self.registry_dir = registry_dir
        self.known_versions = tuple(known_versions)
        self.wipe_delay = wipe_delay
        self.on_wipe = on_wipe
        self.changes = changes
        self.poll_interval = poll_interval
        self.probe_interval = probe_interval
        self.call_timeout = call_timeout
        self._lock = threading.Lock()
        self._instances: dict[Path, PluginInstance] = {}
        self._sequence = itertools.count(1)
        self._registration_retries = RetryTracker(_REGISTRATION_BACKOFF)
        self._wipe_retries = RetryTracker(_WIPE_BACKOFF)
        self._last_connected: dict[str, float] = {}  # driver -> when an instance was last seen connected
        self._wiped: set[str] = set()
        self._last_probe = 0.0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pluginwatcher-{registry_dir.name}", daemon=True)

    # -- reading -------------------------------------------------------------------------------

    def client(self, driver: str) -> PluginClient | None:
        """The client of the driver's most recently registered connected instance, or None."""
        with self._lock:
            candidates = [i for i in self._instances.values() if i.driver == driver and i.connected]
        if not candidates:
            return None
        return max(candidates, key=lambda i: i.sequence).client

    def drivers(self) -> frozenset[str]:
        """The drivers with at least one connected instance."""
        with self._lock:
            return frozenset(i.driver for i in self._instances.values() if i.connected)

    def instances(self) -> list[PluginInstance]:
        """Every registered instance, oldest first (for diagnostics and tests)."""
        with self._lock:
            return sorted(self._instances.values(), key=lambda i: i.sequence)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop watching and close every plugin channel (bounded: one poll plus one registration)."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=REGISTRATION_TIMEOUT_SECONDS * 2 + 5)
        with self._lock:
            instances, self._instances = list(self._instances.values()), {}
        for instance in instances:
            instance.client.close()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.poll()
            except Exception:  # a bug must not end plugin registration for the node: log, go on
                log.exception("plugin watcher of %s", self.registry_dir)
            self._stopping.wait(self.poll_interval)

    def poll(self) -> None:
        """One round: registrations, connectivity, wiping (the thread calls it; tests may too)."""
        changed = self._scan()
        now = time.monotonic()
        if now - self._last_probe >= self.probe_interval:
            self._last_probe = now
            changed |= self._probe()
        if changed and self.changes is not None:
            self.changes.bump()
        self._wipe_absent()

    # -- registration --------------------------------------------------------------------------

    def _scan(self) -> bool:
        present = _socket_identities(self.registry_dir)
        changed = False
        with self._lock:
            stale = [i for path, i in self._instances.items() if present.get(path) != i.identity]
            for instance in stale:
                del self._instances[instance.identity.path]
            registered = {i.identity for i in self._instances.values()}
        for instance in stale:
            log.info("plugin %s at %s deregistered (socket removed)", instance.driver, instance.identity.path)
            instance.client.close()
            changed = True
        self._registration_retries.forget(lambda key: key in present.values())
        for identity in present.values():
            if identity in registered or not self._registration_retries.due(identity):
                continue
            if self._stopping.is_set():
                break
            changed |= self._register(identity)
        return changed

    def _register(self, identity: SocketIdentity) -> bool:
        channel = grpc.insecure_channel(f"unix://{identity.path}")
        try:
            _, info = register(
                channel,
                identity.path,
                known=self.known_versions,
                timeout=min(self.call_timeout, REGISTRATION_TIMEOUT_SECONDS),
            )
        except RegistrationRejected as exc:
            delay = self._registration_retries.failed(identity)
            log.warning("plugin at %s refused: %s; trying again in %.1f s", identity.path, exc, delay)
            return False
        except grpc.RpcError as exc:
            delay = self._registration_retries.failed(identity)
            log.debug("plugin at %s does not answer (%s); trying again in %.1f s", identity.path, exc.code(), delay)
            return False
        finally:
            channel.close()
        self._registration_retries.succeeded(identity)
        instance = PluginInstance(identity, PluginClient(info, timeout=self.call_timeout), next(self._sequence))
        with self._lock:
            self._instances[identity.path] = instance
            self._last_connected[info.driver] = time.monotonic()
            self._wiped.discard(info.driver)
        log.info("plugin %s registered from %s: %s at %s", info.driver, identity.path.name, info.version, info.endpoint)
        return True

    def _probe(self) -> bool:
        with self._lock:
            instances = list(self._instances.values())
        changed = False
        for instance in instances:
            connected = _accepts_connections(instance.client.info.endpoint)
            if connected == instance.connected:
                continue
            changed = True
            if connected:
                # Someone answers again at a path whose process was gone: a restarted plugin that reused
                # the very same file identity, or one that was only stuck.  Registering it again is
                # harmless either way and tells a new process that kubelet knows it.
                log.info(
                    "plugin %s from %s answers again; registering it again",
                    instance.driver,
                    instance.identity.path.name,
                )
                with self._lock:
                    if self._instances.get(instance.identity.path) is instance:
                        del self._instances[instance.identity.path]
                instance.client.close()
            else:
                log.info("plugin %s from %s disconnected", instance.driver, instance.identity.path.name)
                instance.connected = False
        return changed

    # -- wiping --------------------------------------------------------------------------------

    def _wipe_absent(self) -> None:
        now = time.monotonic()
        connected = self.drivers()
        with self._lock:
            for driver in connected:
                self._last_connected[driver] = now
                self._wiped.discard(driver)
            due = [
                driver
                for driver, seen in self._last_connected.items()
                if driver not in connected and driver not in self._wiped and now - seen >= self.wipe_delay
            ]
        for driver in due:
            if not self._wipe_retries.due(driver) or self.on_wipe is None:
                continue
            try:
                self.on_wipe(driver)
            except Exception as exc:
                delay = self._wipe_retries.failed(driver, exc)
                log.warning("wiping the slices of %s failed: %s; trying again in %.1f s", driver, exc, delay)
                continue
            self._wipe_retries.succeeded(driver)
            with self._lock:
                if not any(i.driver == driver and i.connected for i in self._instances.values()):
                    self._wiped.add(driver)  # else it came back meanwhile: its plugin republishes anyway
