import os

import numpy as np
import pytest
from numba import njit

from pymc_crf.allocation import advise_huge_pages, empty_pages, zeros_pages


@njit
def _filled(shape):
    a = empty_pages(shape)
    f = a.reshape(-1)
    for i in range(f.size):
        f[i] = i
    return a, zeros_pages(shape)


def test_large_and_small_arrays_are_ordinary_float_arrays():
    """Shapes, dtype, contents and zero fill, below and above the 4 MB advice threshold (the
    advice itself is invisible to the values)."""
    for shape in [(3,), (5, 4), (1 << 20,), (40_000, 10, 10)]:
        a, z = _filled(shape)
        assert a.shape == shape and z.shape == shape
        assert a.dtype == np.float64 and z.dtype == np.float64
        np.testing.assert_array_equal(a.reshape(-1), np.arange(a.size, dtype=np.float64))
        assert not z.any()
    assert empty_pages(7).shape == (7,)


@pytest.mark.skipif(not os.path.isdir("/sys/kernel/mm/transparent_hugepage"),
                    reason="no transparent huge pages (Linux only): MADV_HUGEPAGE is refused")
def test_the_kernel_takes_the_advice():
    """madvise(MADV_HUGEPAGE) returns 0 for a large array (and for a small one, which is not
    advised); a wrong address or length would make it fail with -1."""
    assert advise_huge_pages(np.empty(5_000_000)) == 0
    assert advise_huge_pages(np.empty(10)) == 0
