import numpy as np
from numba import njit

from pymc_crf.inference.allocation import empty_pages, zeros_pages


@njit
def _fill_and_sum(shape):
    a = empty_pages(shape)
    f = a.reshape(-1)
    for i in range(f.size):
        f[i] = i
    z = zeros_pages(shape)
    return a, z


def test_large_and_small_arrays_are_ordinary_float_arrays():
    """Shapes, dtype, contents and zero fill, below and above the 4 MB advice threshold (the
    advice itself is invisible to the values)."""
    for shape in [(3,), (5, 4), (1 << 20,), (40_000, 10, 10)]:
        a, z = _fill_and_sum(shape)
        assert a.shape == shape and z.shape == shape
        assert a.dtype == np.float64 and z.dtype == np.float64
        np.testing.assert_array_equal(a.reshape(-1), np.arange(a.size, dtype=np.float64))
        assert not z.any()
    assert empty_pages(7).shape == (7,)
