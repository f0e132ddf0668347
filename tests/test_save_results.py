"""Results saved to disk and read back: every group, value and attr survives a round trip through
zarr and netCDF, and the reloaded result predicts and compares as the original does."""

import warnings

import numpy as np
import pytest
from helpers.models import ising_grid_mrf
from helpers.result_io import assert_same, round_trip

import pymc_crf as pmc

SAMPLERS = ("bethe_mh", "exchange", "langevin_cd")
SHORT = dict(draws=20, tune=20, chains=1, progressbar=False, random_seed=3)

# zarr 3 notes that consolidated metadata (which xarray writes) is not in its format spec yet
pytestmark = pytest.mark.filterwarnings("ignore:Consolidated metadata:UserWarning")


@pytest.fixture(scope="module", params=["map", "ep", "bethe_laplace", *SAMPLERS])
def crf_fit(request, loop_model):
    """One fit of the loop CRF (conftest's ``loop_model``) per method, saved in both formats."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short runs: PyMC's diagnostics warnings
        return pmc.fit(loop_model, method=request.param,
                       **(SHORT if request.param in SAMPLERS else {}))


@pytest.mark.parametrize("fmt", ["zarr", "netcdf"])
def test_crf_results_round_trip_and_still_predict(crf_fit, loop_data, fmt, tmp_path):
    test = loop_data[1]
    back = round_trip(crf_fit, str(tmp_path / f"result.{fmt}"), fmt)
    assert_same(crf_fit, back)
    # the reloaded result carries everything prediction needs (the CRF layout is an attr)
    for how in ("average", "bpe"):
        np.testing.assert_array_equal(pmc.predict(back, test, method=how).marginals,
                                      pmc.predict(crf_fit, test, method=how).marginals)


@pytest.mark.parametrize("fmt", ["zarr", "netcdf"])
def test_mrf_evidence_survives_a_round_trip(fmt, tmp_path):
    model = ising_grid_mrf(3, 40, seed=0, prior_sd=1.0)
    result = pmc.fit(model, method="bethe_laplace")
    back = round_trip(result, str(tmp_path / f"mrf.{fmt}"), fmt)
    assert_same(result, back)
    assert back.attrs["log_marginal_likelihood"] == result.attrs["log_marginal_likelihood"]
    table = pmc.compare({"saved": back, "fresh": result})
    assert table.loc["saved"].equals(table.loc["fresh"])
