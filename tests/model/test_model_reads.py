"""``pmc.fit`` reads the model's random field once: every fitter that takes a CRF or MRF
(``map``, ``laplace``, ``bethe_laplace``, ``ep``, ``nuts`` and the step-method samplers) extracts
the CRF / MRF spec (``extract_crf`` / ``extract_mrf``, which ``extract_random_field`` calls) a
single time and hands it on to the objective, the proposal, the step method, the result's layout attrs and its
per-graph log-likelihood (``build_result(spec=...)``)."""

import sys

import numpy as np
import pymc as pm
import pytest

import pymc_crf as pmc
from pymc_crf.model import random_field, spec


@pytest.fixture
def reads(monkeypatch):
    """Counts the calls of the spec readers, wherever a module imported them by name."""
    import pymc_crf.fitters  # noqa: F401  (every fitter module imported, so every binding patched)

    calls = {"extract_crf": 0, "extract_mrf": 0}
    for name, module in (("extract_crf", spec), ("extract_mrf", random_field)):
        original = getattr(module, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        for mod in list(sys.modules.values()):
            if (getattr(mod, "__name__", "") or "").startswith("pymc_crf") and \
                    getattr(mod, name, None) is original:
                monkeypatch.setattr(mod, name, counted)
    return calls


def _chain_crf():
    rng = np.random.default_rng(0)
    graphs = pmc.GraphBatch.chains([4, 3, 5])
    X = rng.normal(size=(graphs.n_total_nodes, 2))
    y = rng.integers(0, 3, size=graphs.n_total_nodes)
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, 1.0, shape=(2, 3))
        T = pm.Normal("T", 0.0, 1.0, shape=(3, 3))
        pmc.CRF("y", graphs=graphs, node_features=X, node_weights=W, edge_weights=T, observed=y)
    return m


def _ising_mrf():
    rng = np.random.default_rng(1)
    graphs = pmc.GraphBatch.chains([4])
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0, shape=4)
        w = pm.Normal("w", 0.0, 1.0, shape=3)
        pmc.MRF("x", graphs=graphs, node_weights=b, edge_weights=w, parameterization="ising",
                observed=rng.integers(0, 2, size=(20, 4)))
    return m


#: short runs of the samplers: the reads, not the draws, are what is counted
SAMPLED = {"draws": 10, "tune": 10, "chains": 1, "random_seed": 0}
SAMPLERS = [("bethe_mh", SAMPLED), ("langevin_cd", SAMPLED), ("exchange", SAMPLED)]
#: NUTS compiles the model's logp and gradient (10-20 s with an empty PyTensor cache): slow
NUTS = pytest.param("nuts", {**SAMPLED, "cores": 1}, marks=pytest.mark.slow)


@pytest.mark.parametrize("method,options", [
    ("map", {}),
    ("laplace", {"draws": 10}),
    ("bethe_laplace", {"draws": 10}),
    ("ep", {"draws": 10}),
    NUTS,
    *SAMPLERS,
])
def test_one_read_of_the_crf_per_fit(reads, method, options):
    model = _chain_crf()
    pmc.fit(model, method=method, progressbar=False, **options)
    assert reads == {"extract_crf": 1, "extract_mrf": 0}


@pytest.mark.parametrize("method,options", [
    ("map", {}),
    ("laplace", {"draws": 10}),
    ("bethe_laplace", {"draws": 10}),
    NUTS,
    *SAMPLERS,
])
def test_one_read_of_the_mrf_per_fit(reads, method, options):
    model = _ising_mrf()
    pmc.fit(model, method=method, progressbar=False, **options)
    assert reads == {"extract_crf": 0, "extract_mrf": 1}
