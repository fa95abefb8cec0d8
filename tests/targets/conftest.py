"""Fixtures for the targets tests (helpers live in tests/costmodel_testing.py)."""

from __future__ import annotations

import pytest
from costmodel_testing import synthetic_table as _synthetic_table

from edgenlp.targets.costmodel import CostTable


@pytest.fixture
def synthetic_table() -> CostTable:
    return _synthetic_table()
