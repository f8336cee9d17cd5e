"""Optional bearer-token authentication from a kube-style static token file.

The file is CSV, one user a line: ``token,user,uid[,"group1,group2"]`` (kube-apiserver's
``--token-auth-file`` format).  With no file, every request is the anonymous user; with one, a request
without a known ``Authorization: Bearer`` token is refused with 401.  Who the user is reaches the
handlers (for RBAC-shaped tests); nothing is *authorized* here.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from dra_driver.errors import ConfigurationError
from migdra_devcluster.apiserver.errors import Unauthorized

ANONYMOUS_NAME = "system:anonymous"


@dataclass(frozen=True)
class UserInfo:
    """The authenticated user of a request."""

    name: str
    uid: str
    groups: tuple[str, ...]


ANONYMOUS = UserInfo(ANONYMOUS_NAME, "", ("system:unauthenticated",))


class TokenAuthenticator:
    """Tokens from a static token file; ``authenticate`` maps an Authorization header to a user."""

    def __init__(self, users: dict[str, UserInfo]) -> None:
        self.users = users

    @classmethod
    def from_file(cls, path: Path) -> TokenAuthenticator:
        """Parse a token file; a malformed line is a :class:`ConfigurationError` naming the line."""
        users: dict[str, UserInfo] = {}
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigurationError(f"token file {path}: not a text file (not UTF-8: {exc.reason})") from exc
        except OSError as exc:
            raise ConfigurationError(f"token file {path}: cannot read it: {exc.strerror or exc}") from exc
        try:
            rows = list(csv.reader(io.StringIO(text, newline="")))
        except csv.Error as exc:
            raise ConfigurationError(f"token file {path}: not CSV: {exc}") from exc
        for number, row in enumerate(rows, start=1):
            if not row or row[0].startswith("#"):
                continue
            if len(row) < 3 or not row[0].strip() or not row[1].strip():
                raise ConfigurationError(f"token file {path}:{number}: expected 'token,user,uid[,groups]'")
            groups = tuple(g.strip() for g in row[3].split(",") if g.strip()) if len(row) > 3 else ()
            users[row[0].strip()] = UserInfo(row[1].strip(), row[2].strip(), (*groups, "system:authenticated"))
        if not users:
            raise ConfigurationError(f"token file {path}: holds no tokens (one 'token,user,uid[,groups]' a line)")
        return cls(users)

    def first_token(self) -> str:
        """The file's first token (what a written kubeconfig uses by default)."""
        return next(iter(self.users))

    def authenticate(self, authorization: str | None) -> UserInfo:
        """The user of an ``Authorization`` header, or :class:`Unauthorized`."""
        scheme, _, token = (authorization or "").partition(" ")
        user = self.users.get(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise Unauthorized("Unauthorized")
        return user
