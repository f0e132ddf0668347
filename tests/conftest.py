"""Fixtures shared by the test modules; the functions they share (models, random tables, brute-force
references, result round trips) are in ``tests/helpers``."""

import numpy as np
import pymc  # noqa: F401
import pytensor
import pytest
from helpers.linker import use_test_linker
from hypothesis import settings

settings.register_profile("default", deadline=None, max_examples=25, derandomize=True)
settings.load_profile("default")

# PyMC is imported here, before any test captures output: imported for the first time inside a
# test with captured stdout (``pmc.fitters`` is imported lazily, so a CLI test can be the first),
# its progress bars keep writing to that test's closed capture ("I/O operation on closed file" in
# every later fit with a progress bar in the same process).


# How the tests run compiled PyTensor graphs: helpers/linker.py.
use_test_linker()


@pytest.fixture
def numba_mode():
    """Compile this test's PyTensor graphs in the NUMBA mode, as users' models are compiled."""
    with pytensor.config.change_flags(mode="NUMBA"):
        yield


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


# Tests that compile the same large numba kernels run on one xdist worker. With empty numba caches,
# two workers reaching the same kernel family at the same time both compile it (several seconds a
# kernel); on one worker the second test finds it compiled, and tests of the family on the other
# worker later load it from numba's disk cache. (xdist's own ``--dist loadgroup`` marks groups by
# rewriting node ids, which pytest 9 ignores; a scheduler hook does not depend on that.)
_KERNEL_FAMILIES = {
    "ep-kernels": ("tests/fitters/test_ep.py::", "tests/fitters/test_ard.py::"),
    "chain-lane-kernels": ("tests/inference/test_chain.py::", "tests/inference/test_chain_small.py::",
                           "tests/inference/test_chain_edge_features.py::", "tests/test_threads.py::"),
    "loopy-kernels": ("tests/inference/test_bp.py::", "tests/inference/test_bp_trust.py::",
                      "tests/inference/test_loopy.py::"),
}


# Modules whose module-scoped fixtures fit models: their tests run on one worker, so each fixture
# is computed once (on two workers it was computed twice, up to 11 s each with empty caches).
_FIXTURE_MODULES = (
    "tests/fitters/test_beta_process.py::", "tests/fitters/test_ensemble.py::",
    "tests/fitters/test_randomized_map.py::", "tests/model/test_prediction_group.py::",
    "tests/test_calibration.py::", "tests/test_distributed.py::", "tests/test_fuzz_api.py::",
    "tests/test_loo.py::", "tests/test_plots.py::", "tests/test_predict.py::",
    "tests/test_queries.py::", "tests/test_reliability.py::", "tests/test_save_results.py::",
    "tests/test_tagger.py::",
)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class KernelFamilyScheduling(LoadScopeScheduling):
        """Every test its own unit of work (as ``--dist load``), but a kernel family's tests one,
        and a module's with costly module-scoped fixtures one."""

        def _split_scope(self, nodeid: str) -> str:
            for family, prefixes in _KERNEL_FAMILIES.items():
                if nodeid.startswith(prefixes):
                    return family
            if nodeid.startswith(_FIXTURE_MODULES):
                return nodeid.split("::", 1)[0]
            return nodeid

    return KernelFamilyScheduling(config, log)
