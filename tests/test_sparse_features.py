"""Sparse (scipy.sparse) node and edge features give the same numbers as the dense arrays.

Every path that multiplies features by weights is checked on the same data given densely and as
CSR: the engine objective (value, gradient, pointwise), the compiled PyMC logp and dlogp (what NUTS
uses), the MAP, Bethe-Laplace and EP fits, and ``pmc.predict``.
"""

import numpy as np
import pymc as pm
import pytensor
import pytest
import scipy.sparse as sp

import pymc_crf as pmc
from pymc_crf.feature_products import features_dot, features_tdot, row_quadratic_forms
from pymc_crf.fitters import extract_crf
from pymc_crf.model.objective import CRFLogLikelihood, GaussianLogPrior

CHAIN = pmc.GraphBatch.chains([4, 1, 6, 3])
# a tree and a four-cycle with a chord: the junction tree engine
LOOPY = pmc.GraphBatch.from_edges([np.array([[0, 1], [1, 2], [1, 3]]),
                                   np.array([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]])], [4, 4])


def _features(rows: int, cols: int, rng) -> np.ndarray:
    """Random features with about 60% exact zeros (so CSR has real structure)."""
    return rng.normal(size=(rows, cols)) * (rng.random((rows, cols)) < 0.4)


def _data(batch, rng, K=3):
    X = _features(batch.n_total_nodes, 5, rng)
    Xe = _features(batch.n_edges, 3, rng)
    Xe[:, 0] = 1.0  # a bias edge feature
    y = rng.integers(0, K, size=batch.n_total_nodes)
    return X, Xe, y


def _model(batch, X, Xe, y, *, sparse: bool, potential="loglinear", edge="features", K=3):
    conv = sp.csr_matrix if sparse else np.asarray
    eps = 0.05 if potential == "probit" else 0.0   # label noise is the probit's
    with pm.Model() as m:
        W = pm.Normal("W", 0.1, 1.3, shape=(X.shape[1], K))
        if edge == "features":
            V = pm.Normal("V", 0.0, 0.8, shape=(Xe.shape[1], K, K))
            pmc.CRF("y", graphs=batch, node_features=conv(X), node_weights=W,
                    edge_features=conv(Xe), edge_weights=V, potential=potential, epsilon=eps,
                    observed=y)
        else:
            T = pm.Normal("T", 0.0, 0.8, shape=(K, K))
            pmc.CRF("y", graphs=batch, node_features=conv(X), node_weights=W, edge_weights=T,
                    potential=potential, epsilon=eps, observed=y)
    return m


def _newton_polish(spec, w, h=1e-5):
    """One Newton step on the log posterior from ``w`` (gradient from the engine objective)."""
    lik, prior = CRFLogLikelihood(spec), GaussianLogPrior(spec)

    def grad(x):
        return lik(x)[1] + prior(x)[1]

    eye = np.eye(w.size)
    H = np.stack([(grad(w + h * e) - grad(w - h * e)) / (2 * h) for e in eye])
    return w - np.linalg.solve(0.5 * (H + H.T), grad(w))


def test_feature_products_match_dense():
    rng = np.random.default_rng(0)
    X = _features(30, 7, rng)
    W = rng.normal(size=(7, 3, 3))
    G = rng.normal(size=(30, 4))
    V = rng.normal(size=(7, 7))
    Xs = sp.csr_matrix(X)
    np.testing.assert_allclose(features_dot(Xs, W), np.tensordot(X, W, axes=(1, 0)), atol=1e-14)
    np.testing.assert_allclose(features_tdot(Xs, G), X.T @ G, atol=1e-14)
    np.testing.assert_allclose(row_quadratic_forms(Xs, V, block=8),
                               np.einsum("rf,fg,rg->r", X, V, X), atol=1e-12)


@pytest.mark.parametrize("batch", [CHAIN, LOOPY], ids=["chain", "loopy"])
@pytest.mark.parametrize("potential", ["loglinear", "probit"])
def test_engine_objective_sparse_equals_dense(batch, potential):
    rng = np.random.default_rng(1)
    X, Xe, y = _data(batch, rng)
    dense = CRFLogLikelihood(extract_crf(_model(batch, X, Xe, y, sparse=False,
                                                potential=potential)))
    spec = extract_crf(_model(batch, X, Xe, y, sparse=True, potential=potential))
    assert sp.issparse(spec.node_features) and sp.issparse(spec.edge_features)
    sparse = CRFLogLikelihood(spec)
    for _ in range(3):
        w = rng.normal(size=spec.flat_size)
        (v0, g0), (v1, g1) = dense(w), sparse(w)
        assert abs(v0 - v1) < 1e-10
        np.testing.assert_allclose(g1, g0, rtol=0, atol=1e-10)
        np.testing.assert_allclose(sparse.pointwise(w), dense.pointwise(w), rtol=0, atol=1e-10)
        v = rng.normal(size=spec.flat_size)
        for a, b in zip(sparse.pushforward(w, v), dense.pushforward(w, v), strict=True):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-10)


@pytest.mark.parametrize("potential", ["loglinear", "probit"])
def test_compiled_logp_and_gradient_sparse_equal_dense(potential):
    """The PyTensor path (structured_dot) that NUTS and the compiled MAP use; every graph
    rewrite applies cleanly (a failing rewrite raises here instead of logging a traceback)."""
    rng = np.random.default_rng(2)
    X, Xe, y = _data(CHAIN, rng)
    point = {"W": rng.normal(size=(5, 3)), "V": rng.normal(size=(3, 3, 3))}
    out = []
    for sparse in (False, True):
        m = _model(CHAIN, X, Xe, y, sparse=sparse, potential=potential)
        with pytensor.config.change_flags(on_opt_error="raise"):
            out.append((m.compile_logp()(point), m.compile_dlogp()(point)))
    assert abs(out[0][0] - out[1][0]) < 1e-10
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=0, atol=1e-10)


@pytest.mark.parametrize("batch", [CHAIN, LOOPY], ids=["chain", "loopy"])
def test_map_and_predict_sparse_equal_dense(batch):
    rng = np.random.default_rng(3)
    X, Xe, y = _data(batch, rng)
    models = [_model(batch, X, Xe, y, sparse=s) for s in (False, True)]
    fits = [pmc.fit(m, method="map", gtol=1e-12, ftol=0.0) for m in models]
    # L-BFGS stops where the objective stops decreasing in float64 (gradient ~1e-8), so the two
    # optimiser outputs agree to its own tolerance; one Newton step on each (exact gradient,
    # Hessian by central differences of it) reaches the MAP itself, where they agree to 1e-10.
    maps = []
    for m, f in zip(models, fits, strict=True):
        spec = extract_crf(m)
        w = spec.flatten({n: f.posterior[n].values[0, 0] for n in ("W", "V")})
        maps.append(_newton_polish(spec, w))
    w_dense = extract_crf(models[0]).flatten({n: fits[0].posterior[n].values[0, 0]
                                              for n in ("W", "V")})
    w_sparse = extract_crf(models[1]).flatten({n: fits[1].posterior[n].values[0, 0]
                                               for n in ("W", "V")})
    np.testing.assert_allclose(w_sparse, w_dense, rtol=0, atol=1e-7)
    np.testing.assert_allclose(maps[1], maps[0], rtol=0, atol=1e-10)
    data = [pmc.CRFData(batch, y, X, Xe, n_labels=3),
            pmc.CRFData(batch, y, sp.csr_matrix(X), sp.csr_matrix(Xe), n_labels=3)]
    for method in ("bpe", "map", "average"):
        p0 = pmc.predict(fits[0], data[0], method)
        p1 = pmc.predict(fits[0], data[1], method)
        np.testing.assert_allclose(p1.marginals, p0.marginals, rtol=0, atol=1e-10)
        np.testing.assert_array_equal(p1.labels, p0.labels)
        p2 = pmc.predict(fits[1], data[1], method)  # the sparse fit on sparse data
        np.testing.assert_allclose(p2.marginals, p0.marginals, rtol=0, atol=1e-7)
    # the predictions groups: the sparse features are stored as their CSR arrays
    pmc.predict(fits[1], data[1], "bpe", predictions=True, sample_labels=3, random_seed=0)
    pmc.predict(fits[0], data[0], "bpe", predictions=True, sample_labels=3, random_seed=0)
    c0, c1 = fits[0]["predictions_constant_data"], fits[1]["predictions_constant_data"]
    for key, dense in (("node_features", X), ("edge_features", Xe)):
        np.testing.assert_array_equal(c0[key].values, dense)
        csr = sp.csr_matrix((c1[f"{key}_data"].values, c1[f"{key}_indices"].values,
                             c1[f"{key}_indptr"].values), shape=c1.attrs[f"{key}_shape"])
        np.testing.assert_array_equal(csr.toarray(), dense)
        assert {f"{key}_data", f"{key}_indices", f"{key}_indptr"} <= set(c1.data_vars)
    np.testing.assert_allclose(fits[1]["predictions"]["y_marginals"].values,
                               fits[0]["predictions"]["y_marginals"].values, rtol=0, atol=1e-7)


def test_bethe_laplace_sparse_equals_dense():
    rng = np.random.default_rng(4)
    X, Xe, y = _data(LOOPY, rng)
    fits = [pmc.fit(_model(LOOPY, X, Xe, y, sparse=s, potential="probit"),
                    method="bethe_laplace", draws=5, random_seed=0) for s in (False, True)]
    for group in ("mean_vector", "covariance_matrix"):
        np.testing.assert_allclose(fits[1].fit[group].values, fits[0].fit[group].values,
                                   rtol=1e-7, atol=1e-9)


def test_ep_sparse_equals_dense():
    """EP densifies its factor rows; its fit and model-averaged prediction match the dense input."""
    rng = np.random.default_rng(5)
    X, Xe, y = _data(CHAIN, rng)
    fits = [pmc.fit(_model(CHAIN, X, Xe, y, sparse=s, potential="probit", edge="shared"),
                    method="ep", draws=5, random_seed=0) for s in (False, True)]
    for group in ("mean_vector", "covariance_matrix"):
        np.testing.assert_allclose(fits[1].fit[group].values, fits[0].fit[group].values,
                                   rtol=0, atol=1e-10)
    p = [pmc.predict(f, pmc.CRFData(CHAIN, y, x, n_labels=3), "model_average")
         for f, x in zip(fits, (X, sp.csr_matrix(X)), strict=True)]
    np.testing.assert_allclose(p[1].marginals, p[0].marginals, rtol=0, atol=1e-10)


def test_sparse_features_with_the_wrong_number_of_rows_are_refused():
    rng = np.random.default_rng(6)
    X, Xe, y = _data(CHAIN, rng)
    with pytest.raises(ValueError, match=r"sparse node features must have shape \(14, n_features"):
        _model(CHAIN, X[:-1], Xe, y, sparse=True)
    with pytest.raises(ValueError, match=r"sparse edge features must have shape \(10, n_features"):
        _model(CHAIN, X, Xe[:-2], y, sparse=True)


def test_nan_in_sparse_features_is_refused():
    rng = np.random.default_rng(7)
    X, Xe, y = _data(CHAIN, rng)
    Xs = sp.csr_matrix(X)
    Xs.data[3] = np.nan
    row = int(np.searchsorted(Xs.indptr, 3, side="right") - 1)
    with pytest.raises(ValueError, match=f"sparse node features contain NaN or inf .first at row "
                                         f"{row}"):
        pmc.CRFData(CHAIN, y, Xs, n_labels=3)


def test_diagonal_laplace_is_the_exact_hessian_diagonal_without_edges():
    """Graphs of one node: positions are independent, so the per-token Fisher diagonal is the
    exact negative Hessian diagonal (checked by central differences of the gradient)."""
    from pymc_crf.fitters.diagonal_laplace import diagonal_laplace_draws, diagonal_laplace_sd
    from pymc_crf.model.predictors import averaged_marginals, crf_layout

    rng = np.random.default_rng(8)
    batch = pmc.GraphBatch.chains([1] * 30)
    X = _features(30, 4, rng)
    y = rng.integers(0, 3, size=30)
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, 1.3, shape=(4, 3))
        pmc.CRF("y", graphs=batch, node_features=sp.csr_matrix(X), node_weights=W, observed=y)
    spec = extract_crf(m)
    lik, prior = CRFLogLikelihood(spec), GaussianLogPrior(spec)
    w = rng.normal(size=spec.flat_size)
    h = 1e-5
    diag = [-(lik(w + h * e)[1] + prior(w + h * e)[1] - lik(w - h * e)[1]
              - prior(w - h * e)[1])[i] / (2 * h) for i, e in enumerate(np.eye(w.size))]
    np.testing.assert_allclose(diagonal_laplace_sd(spec, w), 1.0 / np.sqrt(diag), rtol=1e-7)
    data = pmc.CRFData(batch, y, sp.csr_matrix(X), n_labels=3)
    avg = averaged_marginals(data, crf_layout(spec),
                             diagonal_laplace_draws(spec, w, np.zeros_like(w), draws=2))
    np.testing.assert_allclose(avg, lik.engine.marginals(batch, *lik.log_potentials(w)).node,
                               atol=1e-12)


def test_diagonal_laplace_refuses_missing_labels():
    from pymc_crf.fitters.diagonal_laplace import diagonal_laplace_sd

    rng = np.random.default_rng(8)
    batch = pmc.GraphBatch.chains([1] * 10)
    y = rng.integers(0, 3, size=10)
    y[::2] = -1
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, 1.0, shape=(4, 3))
        pmc.CRF("y", graphs=batch, node_features=rng.normal(size=(10, 4)), node_weights=W,
                observed=y)
    with pytest.raises(ValueError, match="needs every label observed"):
        diagonal_laplace_sd(extract_crf(m), np.zeros(12))


def test_prior_and_posterior_predictive_draws_with_sparse_features():
    # the numba wrapper of random variables cannot take a sparse input: PyTensor's object-mode
    # fallback draws instead, from the CRF's own distribution (checked against exact marginals)
    import arviz as az

    from pymc_crf.inference import ChainEngine

    rng = np.random.default_rng(0)
    b = pmc.GraphBatch.chains([3, 2])
    X = np.eye(5)[:, :4] + 0.5
    W = rng.normal(size=(4, 2))
    T = np.array([[0.8, -0.3], [-0.5, 0.6]])
    with pm.Model() as m:
        pmc.CRF("y", graphs=b, node_features=sp.csr_matrix(X), node_weights=W, edge_weights=T,
                observed=np.array([0, 1, 0, 1, 1]))
    prior = pm.sample_prior_predictive(draws=4000, model=m, random_seed=1)
    draws = pmc.unpad_labels(b, prior["prior_predictive"]["y"].values.reshape(-1, 2, 3))
    exact = ChainEngine().marginals(b, X @ W, T[None]).node[:, 1]
    se = np.sqrt(exact * (1 - exact) / draws.shape[0])
    assert np.all(np.abs(draws.mean(axis=0) - exact) < 4.5 * se)
    with pm.Model() as m2:
        w = pm.Normal("w", 0.0, 1.0, shape=(4, 2))
        pmc.CRF("y", graphs=b, node_features=sp.csr_matrix(X), node_weights=w, edge_weights=T,
                observed=np.array([0, 1, 0, 1, 1]))
    idata = az.from_dict({"posterior": {"w": np.broadcast_to(W, (1, 3, 4, 2)).copy()}})
    post = pm.sample_posterior_predictive(idata, model=m2, random_seed=0, progressbar=False)
    assert post["posterior_predictive"]["y"].shape == (1, 3, 2, 3)
