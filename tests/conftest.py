"""Shared fixtures: a fresh lake per test and the path to the shared real data."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture
def lake(tmp_path: Path):
    from lake.catalog import Lake

    return Lake(tmp_path / "lake")


@pytest.fixture
def shared_data() -> Path:
    # CI and every developer machine have ../shared/data; its absence is a setup error.
    assert SHARED_DATA.exists(), f"shared data not found at {SHARED_DATA}"
    return SHARED_DATA
