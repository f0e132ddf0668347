import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("default", deadline=None, max_examples=25, derandomize=True)
settings.load_profile("default")


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
    from pymc_crf.cli import build_bcrf_model

    return build_bcrf_model(loop_data[0])
