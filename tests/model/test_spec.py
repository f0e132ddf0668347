"""Reading the CRF back out of a model (``extract_crf``): weights, priors, and models rebuilt by
``clone_model``, ``pm.observe`` and ``pm.do``."""

import numpy as np
import pymc as pm
import pytest
from pymc.model.fgraph import clone_model
from scipy.optimize import minimize_scalar

import pymc_crf as pmc
from pymc_crf.fitters import extract_crf, require_gaussian_prior


def test_extract_crf_and_prior_checks(loop_data, loop_model):
    spec = extract_crf(loop_model)
    assert spec.flat_size == 24 and spec.n_labels == 2 and spec.potential == "probit"
    assert spec.edge_weights.prior == "normal"
    np.testing.assert_allclose(spec.edge_weights.prior_sd, 5**0.5)
    np.testing.assert_array_equal(spec.labels, loop_data[0].labels)
    w = np.arange(24.0)
    np.testing.assert_array_equal(spec.flatten(spec.unflatten(w)), w)
    require_gaussian_prior(spec, "ep")
    train = loop_data[0]
    with pm.Model(coords=train.coords) as m2:
        s = pm.HalfNormal("s", 1.0)
        w = pm.Normal("w", 0.0, s, dims=("edge_feature", "label_i", "label_j"))
        pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features, edge_weights=w,
                potential="probit", observed=train.labels)
    with pytest.raises(ValueError, match="depend on other random variables"):
        require_gaussian_prior(extract_crf(m2), "ep")
    with pm.Model(coords=train.coords) as m3:
        w = pm.StudentT("w", nu=3, mu=0.0, sigma=1.0, dims=("edge_feature", "label_i", "label_j"))
        pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features, edge_weights=w,
                potential="probit", observed=train.labels)
    with pytest.raises(ValueError, match="StudentT, not Normal"):
        require_gaussian_prior(extract_crf(m3), "ep")
    with pm.Model() as m4:
        pm.Normal("x", 0, 1, observed=[0.0])
    with pytest.raises(ValueError, match="observed pmc.CRF"):
        extract_crf(m4)


def _unobserved_model(train):
    with pm.Model(coords=train.coords) as m:
        w = pm.Normal("w", 0.0, 5**0.5, dims=("edge_feature", "label_i", "label_j"))
        pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features, edge_weights=w,
                potential="probit")
    return m


def test_rebuilt_models_read_back_and_fit_like_the_original(loop_data, loop_model):
    """A model passed through clone_model or pm.observe names its own weight variable (not the
    original's), so MAP runs on the engine objective and finds the same optimum."""
    train = loop_data[0]
    ref = pmc.fit(loop_model, method="map")
    observed = pm.observe(_unobserved_model(train), {"t": train.padded_labels})
    for rebuilt in (clone_model(loop_model), observed):
        spec = extract_crf(rebuilt)
        assert spec.edge_weights.prior == "normal" and spec.free_vars == ()
        assert spec.model is rebuilt
        np.testing.assert_array_equal(spec.labels, train.labels)
        np.testing.assert_array_equal(spec.edge_features, train.edge_features)
        res = pmc.fit(rebuilt, method="map")
        assert '"engine_objective": true' in res.attrs["settings"]
        np.testing.assert_allclose(res["posterior"]["w"].values, ref["posterior"]["w"].values,
                                   atol=1e-6)


def test_do_fixes_the_weights(loop_data, loop_model):
    """pm.do replaces the weights by constants: nothing is left to fit by a weight-space method."""
    fixed = pm.do(loop_model, {"w": np.zeros((6, 2, 2))})
    spec = extract_crf(fixed)
    assert spec.edge_weights.prior == "other" and "not a free PyMC variable" in spec.edge_weights.reason
    with pytest.raises(ValueError, match="not a free PyMC variable"):
        require_gaussian_prior(spec, "ep")


def test_tied_node_and_edge_weights_are_refused_by_weight_space_fitters():
    # one variable as both weights fills two slots of the flat vector that would move apart
    g = pmc.GraphBatch.chains([4])
    X = np.array([[0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 1, 1]])
    with pm.Model() as m:
        a = pm.Normal("a", 0.0, 0.2)
        pmc.MRF("x", graphs=g, node_weights=a, edge_weights=a, parameterization="ising",
                observed=X)
    for method in ("bethe_laplace", "bethe_mh", "exchange", "langevin_cd"):
        kw = {"draws": 5} if method == "bethe_laplace" else {"draws": 5, "tune": 5, "chains": 1}
        with pytest.raises(ValueError, match="'a' is both the node and the edge weights"):
            pmc.fit(m, method=method, **kw)
    # the compiled MAP takes the model as written: the maximiser of its logp by a bracketing
    # line search (Brent's method, no gradients)
    res = pmc.fit(m, method="map")
    logp = m.compile_logp()
    best = minimize_scalar(lambda v: -logp({"a": v}), bounds=(-0.5, 0.5), method="bounded",
                           options={"xatol": 1e-7}).x
    assert abs(float(res["posterior"]["a"].values.ravel()[0]) - best) < 1e-5


def test_weight_space_fitters_name_a_fixed_weight_table():
    import numpy as np
    import pymc as pm
    import pytest

    import pymc_crf as pmc

    b = pmc.GraphBatch.chains([3, 2])
    X = np.random.default_rng(0).normal(size=(5, 2))
    with pm.Model() as m:
        W = pm.Normal("W", 0, 1, shape=(2, 2))
        pmc.CRF("y", graphs=b, node_features=X, node_weights=W, edge_weights=np.eye(2),
                observed=np.array([0, 1, 0, 1, 1]))
    for method in ("ep", "bethe_laplace"):
        with pytest.raises(ValueError, match="edge_weights is a constant or an expression"):
            pmc.fit(m, method=method, progressbar=False)


@pytest.mark.parametrize("sizes,match", [
    ((3, 3, 3), r"node_weights 'W' have shape \(3, 3\); the data and n_labels=3 need \(2, 3\)"),
    ((2, 4, 4), r"node_weights 'W' have shape \(2, 4\); .* need \(2, 3\)"),
    ((2, 3, 4), r"edge_weights 'T' have shape \(4, 4\); .* need \(3, 3\) \(labels, labels\)"),
])
def test_weights_sized_by_coords_that_do_not_match_the_data_are_named(sizes, match):
    """Weights with dims have no static shape, so only the compiled logp checked them: the
    weight-space fitters failed with numpy's "shapes (9,2) and (3,3) not aligned", "cannot
    reshape array of size 18 into shape (15,)" or "out must be a C-contiguous float64 array"."""
    nf, K, K2 = sizes
    batch = pmc.GraphBatch.chains([3, 2, 4])
    X = np.random.default_rng(0).normal(size=(9, 2))
    coords = {"f": range(nf), "k": range(K), "i": range(K2), "j": range(K2)}
    with pm.Model(coords=coords) as m:
        W = pm.Normal("W", 0, 1, dims=("f", "k"))
        T = pm.Normal("T", 0, 1, dims=("i", "j"))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T,
                observed=np.array([0, 1, 2, 1, 0, 2, 2, 1, 0]), n_labels=3)
    with pytest.raises(ValueError, match=match):
        extract_crf(m)
    for method in ("bethe_laplace", "ep"):
        with pytest.raises(ValueError, match=match):
            pmc.fit(m, method=method, progressbar=False)
