"""Fixtures for the codex tests (helpers live in ``codex_driver_helpers``)."""

from __future__ import annotations

import pytest
from codex_driver_helpers import Recorder


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()
