"""Static token files and bearer-token authentication."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.errors import ConfigurationError
from migdra_devcluster.apiserver.auth import TokenAuthenticator, UserInfo
from migdra_devcluster.apiserver.errors import Unauthorized


def test_token_file_users_and_groups(tmp_path: Path) -> None:
    path = tmp_path / "tokens.csv"
    path.write_text('# comment\nt1,alice,uid-a,"dev,ops"\nt2,bob,uid-b\n')
    auth = TokenAuthenticator.from_file(path)
    assert auth.first_token() == "t1"
    assert auth.authenticate("Bearer t1") == UserInfo("alice", "uid-a", ("dev", "ops", "system:authenticated"))
    assert auth.authenticate("bearer t2").groups == ("system:authenticated",)


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer nope", "Basic t1", "t1"])
def test_unknown_or_missing_tokens_are_unauthorized(tmp_path: Path, header: str | None) -> None:
    path = tmp_path / "tokens.csv"
    path.write_text("t1,alice,uid-a\n")
    with pytest.raises(Unauthorized):
        TokenAuthenticator.from_file(path).authenticate(header)


@pytest.mark.parametrize("content", ["", "only-a-token\n", "t1,,uid\n"])
def test_malformed_token_files_are_configuration_errors(tmp_path: Path, content: str) -> None:
    path = tmp_path / "tokens.csv"
    path.write_text(content)
    with pytest.raises(ConfigurationError):
        TokenAuthenticator.from_file(path)
