"""Unit tests are pure functions over tables: they do not run once per transport."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def transport_kind() -> str:
    return "none"
