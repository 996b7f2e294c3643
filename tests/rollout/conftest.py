"""Rollout test fixtures (helpers live in rollout_helpers.py)."""

from __future__ import annotations

import pytest
from rollout_helpers import VERSIONS


@pytest.fixture(params=VERSIONS, ids=lambda v: f"fixtures-{v}")
def fixture_version(request: pytest.FixtureRequest) -> str:
    return str(request.param)
