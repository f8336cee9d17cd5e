"""One real node per host: the claim a running real node holds refuses a second in one line, leaves no
file, and is released when its holder goes -- also when the holder is killed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from migdra_devcluster.realnode.node import RealNodeError, claim_host
from tests.waiting import wait_for

HOLDER = "from migdra_devcluster.realnode.node import claim_host; c = claim_host(); print('held', flush=True); input()"


def test_a_second_claim_is_refused_while_the_first_is_held_and_granted_after() -> None:
    first = claim_host()
    try:
        with pytest.raises(RealNodeError, match="another real node runs on this host"):
            claim_host()
    finally:
        first.close()
    claim_host().close()


def test_the_claim_of_a_killed_holder_is_released() -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(RealNodeError):
        claim_host()
    holder.kill()
    holder.wait(timeout=30)

    def granted() -> bool:
        try:
            claim_host().close()
        except RealNodeError:
            return False
        return True

    wait_for("the killed holder's claim to be released", granted, timeout=10)
    assert holder.stdin is not None
    holder.stdin.close()
    holder.stdout.close()
