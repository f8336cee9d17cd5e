"""Reaching the Kubernetes API with the official client, and saying in one line why it did not work.

Owns: loading the client's configuration -- a kubeconfig file, the usual rules (``KUBECONFIG``, then
``~/.kube/config``) or the pod's service account -- with every way that can fail (a missing, binary
or garbage file, a ``current-context`` that does not exist, no kubeconfig outside a cluster) turned
into a :class:`~dra_driver.errors.ConfigurationError` that names the file or flag and says what
would work; and describing a failed request in one line: the status, reason and message of the
``Status`` the server answered with, or the server and why it could not be reached.  Logs and error
lines use these descriptions, never the client's multi-line dump of headers and body.

Must never: send a request itself, or read configuration from the environment (the client reads
``KUBECONFIG`` and the in-cluster variables; we only learn where it looked).

Errors::

    MigdraError
     ├── ConfigurationError     dra_driver.errors: the kubeconfig (or its absence) cannot be used
     └── ApiRequestError        a request failed: an error answer, or the server could not be reached;
                                retryable for conflicts, throttling, server errors and transport failures
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import urllib3
import urllib3.exceptions
import urllib3.util
import yaml
from kubernetes import client
from kubernetes import config as kube_config_module
from kubernetes.client.exceptions import ApiException
from kubernetes.config import kube_config
from kubernetes.config.config_exception import ConfigException

from dra_driver.errors import ConfigurationError, MigdraError

# Statuses a later attempt of the same request may survive without anyone changing anything.
RETRYABLE_STATUS = frozenset({409, 429, 500, 502, 503, 504})
_DEFAULT_KUBECONFIG = "~/.kube/config"
_loaders: Any = kube_config_module  # the client's loaders carry no type annotations


class ApiRequestError(MigdraError):
    """A request to the API server failed; the message is one line naming the server or the answer."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


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
        raise ConfigurationError(f"{what}: not a kubeconfig (not valid YAML: {_yaml_problem(exc)})") from exc
    if not isinstance(loaded, dict):
        got = "an empty file" if loaded is None else f"a {type(loaded).__name__}"
        raise ConfigurationError(
            f"{what}: not a kubeconfig (expected a mapping with clusters, users, contexts and current-context; "
            f"got {got})"
        )
    return _load(what, config_file=str(path))


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
        raise ConfigurationError(f"{what}: not a kubeconfig (not valid YAML: {_yaml_problem(exc)})") from exc
    except OSError as exc:  # a certificate or token file the kubeconfig names
        raise ConfigurationError(f"{what}: {exc.strerror or exc}: {exc.filename}") from exc
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # a field of the wrong shape
        raise ConfigurationError(f"{what}: not a usable kubeconfig ({type(exc).__name__}: {exc})") from exc
    if not configuration.host:
        raise ConfigurationError(f"{what}: the current context's cluster has no server")
    return configuration


def _first_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """``line 2, column 1: expected ...`` rather than PyYAML's several lines with a caret."""
    if isinstance(exc, yaml.reader.ReaderError):  # a control character: binary content
        return f"character {exc.position}: {exc.reason} (#x{exc.character:04x}): not a text file"
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else str(problem)


def new_api_client(configuration: client.Configuration, *, retries: int | None = None) -> client.ApiClient:
    """An API client; ``retries=0`` makes a transport failure fail at once (for one-shot commands)."""
    if retries is not None:
        configuration.retries = urllib3.util.Retry(total=retries, connect=retries, read=retries, redirect=3)
    return client.ApiClient(configuration)


def describe_failure(exc: BaseException, server: str | None = None) -> str:
    """One line for a failed request: ``the API server X answered 422 Invalid: <the Status message>``, or
    why the server could not be reached."""
    where = f"the API server {server}" if server else "the API server"
    if isinstance(exc, ApiException):
        return f"{where} answered {describe_api_exception(exc)}"
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        reason = str(exc).rpartition(": ")[2] or str(exc)
        return f"cannot reach {where}: {reason}"
    if isinstance(exc, urllib3.exceptions.ConnectTimeoutError):
        return f"cannot reach {where}: connection timed out"
    if isinstance(exc, urllib3.exceptions.ReadTimeoutError):
        return f"{where} did not answer in time"
    if isinstance(exc, urllib3.exceptions.SSLError):
        return f"cannot reach {where}: TLS: {_first_line(exc)}"
    if isinstance(exc, (urllib3.exceptions.HTTPError, OSError)):
        return f"cannot reach {where}: {_first_line(exc)}"
    return f"{type(exc).__name__}: {_first_line(exc)}"


def describe_api_exception(exc: ApiException) -> str:
    """``<status> <reason>: <message>`` from the ``Status`` body kube sends, without headers or the body."""
    reason, message = exc.reason or "", ""
    try:
        status = json.loads(exc.body) if exc.body else None
    except (TypeError, ValueError):
        status = None
    if isinstance(status, dict):
        reason = str(status.get("reason") or reason)
        message = str(status.get("message") or "")
    text = f"{exc.status} {reason}".strip()
    return f"{text}: {_first_line(Exception(message))}" if message else text


def is_transport_failure(exc: BaseException) -> bool:
    """The request never got an answer (refused, reset, timed out, TLS); the server may come back."""
    return isinstance(exc, (urllib3.exceptions.HTTPError, OSError))


def as_request_error(exc: BaseException, what: str, server: str | None = None) -> ApiRequestError:
    """``what`` failed, as an :class:`ApiRequestError` carrying one line and whether to retry."""
    retryable = is_transport_failure(exc) or (isinstance(exc, ApiException) and exc.status in RETRYABLE_STATUS)
    return ApiRequestError(f"{what}: {describe_failure(exc, server)}", retryable=retryable)
