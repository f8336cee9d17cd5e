"""Where the API server is and how to authenticate to it: the official client's configuration and
its ``ApiClient`` (the transport every request of :mod:`dra_driver.kube.client` goes through).

Loads a kubeconfig file, the usual rules (``KUBECONFIG``, then ``~/.kube/config``) or the pod's service
account, with every way that can fail (a missing, binary or garbage file, a ``current-context`` that
does not exist, no kubeconfig outside a cluster) turned into a
:class:`~dra_driver.errors.ConfigurationError` that names the file or flag and says what would work.
Tokens that rotate are followed: the pod's service-account token is read again every minute (the
client's in-cluster loader), and a kubeconfig's ``tokenFile`` whenever the file changes
(:func:`follow_token_file`).

Must never: read configuration from the environment itself (the client reads ``KUBECONFIG`` and the
in-cluster variables; we only learn where it looked), or send a request (a configuration is loaded
completely before anything is asked of the server).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import urllib3.util
import yaml
from kubernetes import client
from kubernetes import config as kube_config_module
from kubernetes.config import kube_config
from kubernetes.config.config_exception import ConfigException

from dra_driver.errors import ConfigurationError, describe_yaml_error

_DEFAULT_KUBECONFIG = "~/.kube/config"
_loaders: Any = kube_config_module  # the client's loaders carry no type annotations


def load_kubeconfig_file(path: Path, *, what: str) -> client.Configuration:
    """The client configuration of one kubeconfig file; ``what`` names it in errors (``--kubeconfig x``)."""
    try:
        text = path.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise ConfigurationError(f"{what}: is a directory; give a kubeconfig file") from None
    except FileNotFoundError:
        raise ConfigurationError(f"{what}: no such file; give the path of a kubeconfig file") from None
    except UnicodeDecodeError as exc:
        raise ConfigurationError(f"{what}: not a kubeconfig (not UTF-8 text: {exc.reason})") from exc
    except OSError as exc:
        raise ConfigurationError(f"{what}: cannot read it: {exc.strerror or exc}") from exc
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"{what}: not a kubeconfig (not valid YAML: {describe_yaml_error(exc)})") from exc
    if not isinstance(loaded, dict):
        got = "an empty file" if loaded is None else f"a {type(loaded).__name__}"
        raise ConfigurationError(
            f"{what}: not a kubeconfig (expected a mapping with clusters, users, contexts and current-context; "
            f"got {got})"
        )
    configuration = _load(what, config_file=str(path))
    token_file = _current_token_file(loaded, path)
    if token_file is not None:
        follow_token_file(configuration, token_file)
    return configuration


def _current_token_file(kubeconfig: dict[str, Any], path: Path) -> Path | None:
    """The ``tokenFile`` of the current context's user, relative to the kubeconfig's directory; None when
    it logs in otherwise (a token given inline wins, as in client-go)."""
    contexts = {c.get("name"): c.get("context") or {} for c in kubeconfig.get("contexts") or [] if isinstance(c, dict)}
    users = {u.get("name"): u.get("user") or {} for u in kubeconfig.get("users") or [] if isinstance(u, dict)}
    user = users.get(contexts.get(kubeconfig.get("current-context"), {}).get("user"), {})
    if not isinstance(user, dict) or user.get("token") or not user.get("tokenFile"):
        return None
    return path.parent / str(user["tokenFile"])


def follow_token_file(configuration: client.Configuration, token_file: Path) -> None:
    """Send the token ``token_file`` holds *now* with every request: read again whenever the file changed.

    Why: a projected ServiceAccount token (and a pod-bound token a development cluster issues again
    after the pod was recreated) is rotated by rewriting the file; client-go re-reads a kubeconfig's
    ``tokenFile``, the official Python client reads it once.  One ``stat`` per request; a file that
    cannot be read keeps the token last read (the request then says why it was refused).
    """
    seen: list[tuple[int, int]] = [(-1, -1)]

    def refresh(config: client.Configuration) -> None:
        try:
            stat = token_file.stat()
            if (stat.st_mtime_ns, stat.st_size) == seen[0]:
                return
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError:
            return
        seen[0] = (stat.st_mtime_ns, stat.st_size)
        config.api_key["BearerToken"] = f"Bearer {token}"

    configuration.refresh_api_key_hook = refresh  # type: ignore[assignment]  # the client types it as None
    refresh(configuration)


def load_client_configuration(kubeconfig: Path | None, *, flag: str, usual_rules: bool) -> client.Configuration:
    """The configuration to reach the API server with, loaded completely before any request is sent.

    With ``kubeconfig``, that file.  Without, ``usual_rules`` means kubectl's: ``KUBECONFIG`` or
    ``~/.kube/config`` when there is one, else the pod's service account; without ``usual_rules``
    only the service account (the node plugin runs in a pod or is given its kubeconfig).  ``flag`` is
    how the user gives a kubeconfig (``--kubeconfig (MIGDRA_KUBECONFIG)``), for the error lines.
    """
    if kubeconfig is not None:
        return load_kubeconfig_file(kubeconfig, what=f"{flag} {kubeconfig}")
    if usual_rules:
        location = str(kube_config.KUBE_CONFIG_DEFAULT_LOCATION)
        source = "~/.kube/config" if location == _DEFAULT_KUBECONFIG else f"KUBECONFIG={location}"
        paths = [Path(p).expanduser() for p in location.split(kube_config.ENV_KUBECONFIG_PATH_SEPARATOR) if p]
        if len(paths) == 1 and paths[0].exists():
            return load_kubeconfig_file(paths[0], what=f"kubeconfig {paths[0]} (from {source})")
        if any(p.exists() for p in paths):
            return _load(f"kubeconfig {source}", config_file=None)
        if location != _DEFAULT_KUBECONFIG:
            raise ConfigurationError(
                f"KUBECONFIG names {location}, which does not exist; or give {flag.partition(' ')[0]} FILE"
            )
    configuration = client.Configuration()
    try:
        _loaders.load_incluster_config(client_configuration=configuration)
    except ConfigException as exc:
        if usual_rules:
            raise ConfigurationError(
                f"no kubeconfig: give {flag.partition(' ')[0]} FILE, set KUBECONFIG, or create ~/.kube/config "
                f"(in-cluster configuration: {exc})"
            ) from exc
        raise ConfigurationError(
            f"no kubeconfig: {flag} is not set and this is not a pod with a service account "
            f"(in-cluster configuration: {exc}); give {flag.partition(' ')[0]} FILE"
        ) from exc
    return configuration


def _load(what: str, *, config_file: str | None) -> client.Configuration:
    configuration = client.Configuration()
    try:
        _loaders.load_kube_config(config_file=config_file, client_configuration=configuration, persist_config=False)
    except ConfigException as exc:
        raise ConfigurationError(f"{what}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"{what}: not a kubeconfig (not valid YAML: {describe_yaml_error(exc)})") from exc
    except OSError as exc:  # a certificate or token file the kubeconfig names
        raise ConfigurationError(f"{what}: {exc.strerror or exc}: {exc.filename}") from exc
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a field of the wrong shape
        raise ConfigurationError(f"{what}: not a usable kubeconfig ({type(exc).__name__}: {exc})") from exc
    if not configuration.host:
        raise ConfigurationError(f"{what}: the current context's cluster has no server")
    return configuration


def new_api_client(configuration: client.Configuration, *, retries: int | None = None) -> client.ApiClient:
    """An API client; ``retries=0`` makes a transport failure fail at once (for one-shot commands)."""
    if retries is not None:
        configuration.retries = urllib3.util.Retry(total=retries, connect=retries, read=retries, redirect=3)
    return client.ApiClient(configuration)
