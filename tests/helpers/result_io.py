"""Saving a result and reading it back, and comparing the two (tests/test_save_results.py,
tests/fitters/test_beta_process.py)."""

import numpy as np
import xarray as xr


def round_trip(result, path: str, fmt: str):
    """Write ``result`` to ``path`` as ``fmt`` ("zarr" or "netcdf") and read it back."""
    if fmt == "zarr":
        result.to_zarr(path)
        return xr.open_datatree(path, engine="zarr").load()
    result.to_netcdf(path)
    return xr.open_datatree(path, engine="h5netcdf").load()


def _same_attrs(back, attrs, where):
    """netCDF reads numbers back as numpy scalars and an empty list as an empty array."""
    assert set(back) == set(attrs), where
    for k, v in attrs.items():
        if isinstance(v, str):
            assert back[k] == v, (where, k)
        else:
            np.testing.assert_array_equal(np.asarray(back[k]), np.asarray(v), err_msg=f"{where} {k}")


def assert_same(result, back):
    """Every group, variable (values, dims, dtype), coordinate and attr of ``back`` equals
    ``result``'s."""
    assert sorted(back.groups) == sorted(result.groups)
    for g in result.groups:
        ds, bs = result[g].to_dataset(), back[g].to_dataset()
        assert set(bs.data_vars) == set(ds.data_vars), g
        _same_attrs(bs.attrs, ds.attrs, g)
        for v in ds.data_vars:
            a, b = ds[v], bs[v]
            assert a.dims == b.dims and a.dtype == b.dtype, (g, v)
            np.testing.assert_array_equal(b.values, a.values, err_msg=f"{g}/{v}")
        for c in ds.coords:
            np.testing.assert_array_equal(bs[c].values, ds[c].values, err_msg=f"{g} coord {c}")
