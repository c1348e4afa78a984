"""Shared fixtures. Test helpers that build pods and play the API server live in tests/kube.py."""

from __future__ import annotations

import pytest

from tests import kube
from webhook import policies


@pytest.fixture(scope="session")
def shipped_policies() -> policies.PolicySet:
    return kube.shipped()


@pytest.fixture(scope="session")
def default_policy(shipped_policies: policies.PolicySet) -> policies.Policy:
    policy = shipped_policies.get("default")
    assert policy is not None
    return policy
