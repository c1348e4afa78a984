"""Shared fixtures. Test helpers that build pods and play the API server live in tests/kube.py."""

from __future__ import annotations

import pytest

from tests import kube
from webhook import policies


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stop before collecting when the published manifests are missing, with one line.

    Many tests read them; without this, a checkout that is not beside shared/ gives dozens of
    failures, or worse, corpus tests that pass on fewer inputs. A UsageError ends the run with
    "ERROR: <the line>" and exit code 4, no traceback.
    """
    try:
        kube.real_world()
    except kube.RealWorldMissing as missing:
        raise pytest.UsageError(str(missing)) from None


@pytest.fixture(scope="session")
def shipped_policies() -> policies.PolicySet:
    return kube.shipped()


@pytest.fixture(scope="session")
def default_policy(shipped_policies: policies.PolicySet) -> policies.Policy:
    policy = shipped_policies.get("default")
    assert policy is not None
    return policy
