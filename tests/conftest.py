"""Fixtures shared by the test modules; the functions they share (models, random tables, brute-force
references, result round trips) are in ``tests/helpers``."""

import numpy as np
import pymc  # noqa: F401
import pytest
from hypothesis import settings

settings.register_profile("default", deadline=None, max_examples=25, derandomize=True)
settings.load_profile("default")

# PyMC is imported here, before any test captures output: imported for the first time inside a
# test with captured stdout (``pmc.fitters`` is imported lazily, so a CLI test can be the first),
# its progress bars keep writing to that test's closed capture ("I/O operation on closed file" in
# every later fit with a progress bar in the same process).


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture(scope="module")
def loop_data():
    """The probit loop data of Qi, Szummer & Minka 2005, sec. 8.1: 8 training, 50 test graphs."""
    import pymc_crf as pmc

    return pmc.datasets.bcrf_synthetic("loop", n_train=8, n_test=50, seed=3)


@pytest.fixture(scope="module")
def loop_model(loop_data):
    """The BCRF model of the training graphs (probit edge potentials, N(0, 5) prior)."""
    from pymc_crf.datasets import bcrf_model

    return bcrf_model(loop_data[0])
