"""Sorted-array set operations agree with NumPy's own on random and edge-case inputs."""

from __future__ import annotations

import numpy as np
import pytest

from curation.sorted_sets import sorted_isin, sorted_union, sorted_unique


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_sorted_sets_match_numpy(dtype: type) -> None:
    rng = np.random.default_rng(7)
    for size in (0, 1, 2, 1000):
        a = rng.integers(0, 50, size).astype(dtype)
        b = rng.integers(0, 2**40, size).astype(dtype)
        both = np.concatenate([a, b])
        assert np.array_equal(sorted_unique(both), np.unique(both))
        assert np.array_equal(sorted_union(a, b), np.union1d(a, b))
        assert np.array_equal(sorted_isin(both, a), np.isin(both, a))
        assert sorted_unique(both).dtype == both.dtype
