"""The tier that judges migdra against upstream (kube-scheduler's allocation, the chart's access under the
real authorizer, the shipped manifests under kube-apiserver's validation), on the binaries ``make kube``
builds (docs/testing.md).

Without the binaries the tier is skipped, so ``make test`` runs on a machine without Go (as is every
test that needs an API server: ``tests.kube_apiserver``); CI sets ``MIGDRA_REQUIRE_KUBE=1`` after
``make kube``, which turns that skip into a failure: the tier can never silently stop running there.
"""

from __future__ import annotations

import os

import pytest

from tests.kube_apiserver import REQUIRE, missing_kube_binaries


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = [item for item in items if "tests/kube/" in item.nodeid]
    reason = missing_kube_binaries()
    if not here or reason is None:
        return
    if os.environ.get(REQUIRE) == "1":
        raise pytest.UsageError(f"{REQUIRE}=1 but {reason}")
    for item in here:
        item.add_marker(pytest.mark.skip(reason=reason))
