"""The exact curvature by blocks of directions (``fitters/bethe_laplace/hessian.py``) against
finite differences of the engine's gradient and the column-by-column products, the exact chain
Hessian diagonal, and the covariance representations of ``fitters/covariance.py`` against the
dense exact covariance."""

from dataclasses import replace

import numpy as np
import pymc as pm
import pytest
import scipy.sparse as sp
from helpers.models import ising_grid_mrf, node_edge_crf

import pymc_crf as pmc
from pymc_crf.fitters.bethe_laplace import weight_problem
from pymc_crf.fitters.bethe_laplace.curvature import fisher_vector_product
from pymc_crf.fitters.bethe_laplace.hessian import (
    CurvatureOperator,
    chain_covariance_block,
    curvature_diagonal,
    exact_fisher_matrix,
)
from pymc_crf.fitters.bethe_laplace.problem import exact_engine
from pymc_crf.fitters.covariance import (
    DenseGaussian,
    ImplicitGaussian,
    inverse_pd,
    lanczos_quadrature,
    laplace_covariance,
    randomized_eigh,
)
from pymc_crf.inference import ChainEngine

CHAINS = pmc.GraphBatch.chains([5, 1, 3, 7, 2])
TREES = pmc.GraphBatch.from_edges([np.array([[0, 1], [1, 2], [1, 3]]),
                                   np.array([[0, 1], [1, 2], [2, 0]])] * 2, [4, 3] * 2)


def _problem(batch, potential, shared, seed=0):
    rng = np.random.default_rng(seed)
    p = weight_problem(node_edge_crf(batch, 3, potential, shared, rng), "bethe_laplace")
    eng = exact_engine(p)
    lik = p.make_likelihood(eng)
    return p, lik, eng, rng.normal(0.0, 0.5, p.size)


def _sparse_row_crf(kind, seed=1):
    """Sparse node features with a shared table ('shared') or constant edge features ('row')."""
    rng = np.random.default_rng(seed)
    N, E, K = CHAINS.n_total_nodes, CHAINS.n_edges, 3
    X = sp.random(N, 5, density=0.5, random_state=seed, format="csr")
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, 1.0, shape=(5, K))
        if kind == "row":
            V = pm.Normal("V", 0.0, 1.0, shape=(2, K, K))
            pmc.CRF("y", graphs=CHAINS, node_features=X, node_weights=W,
                    edge_features=np.tile([1.0, 0.5], (E, 1)), edge_weights=V,
                    observed=rng.integers(0, K, N))
        else:
            T = pm.Normal("T", 0.0, 1.0, shape=(K, K))
            pmc.CRF("y", graphs=CHAINS, node_features=X, node_weights=W, edge_weights=T,
                    observed=rng.integers(0, K, N))
    p = weight_problem(m, "bethe_laplace")
    eng = exact_engine(p)
    return p, p.make_likelihood(eng), eng, rng.normal(0.0, 0.5, p.size)


def _columns(lik, w, eng):
    fvp = fisher_vector_product(lik, w, eng)
    return np.stack([fvp(e) for e in np.eye(w.size)], axis=1)


@pytest.mark.parametrize("batch", [CHAINS, TREES], ids=["chains", "junction-tree"])
@pytest.mark.parametrize("potential", ["loglinear", "probit"])
@pytest.mark.parametrize("shared", [True, False], ids=["shared", "edge-features"])
def test_block_curvature_equals_the_column_products(batch, potential, shared):
    """``exact_fisher_matrix`` = the column-by-column ``J^T C J`` of the engine's own
    covariance-vector products, also when the graphs are split into several chunks."""
    _, lik, eng, w = _problem(batch, potential, shared)
    ref = _columns(lik, w, eng)
    ref = 0.5 * (ref + ref.T)
    scale = np.abs(ref).max()
    np.testing.assert_allclose(exact_fisher_matrix(lik, w, eng), ref, rtol=0, atol=1e-12 * scale)
    # 16000 bytes: the chains' pairwise covariances in batches of a few chains (the longest
    # chain's take 4200-7224 bytes with their work rows, within half of it); 3000: they exceed
    # half of it, so every column comes from unit directions, as for a chain too long for its
    # pairwise covariances
    for memory in (16000, 3000):
        small = exact_fisher_matrix(lik, w, eng, memory=memory)
        np.testing.assert_allclose(small, ref, rtol=0, atol=1e-12 * scale)


@pytest.mark.parametrize("kind", ["shared", "row"])
def test_block_curvature_with_sparse_features_and_constant_edge_rows(kind):
    _, lik, eng, w = _sparse_row_crf(kind)
    ref = _columns(lik, w, eng)
    np.testing.assert_allclose(exact_fisher_matrix(lik, w, eng, memory=3000),
                               0.5 * (ref + ref.T), rtol=0, atol=1e-12 * np.abs(ref).max())
    V = np.random.default_rng(2).normal(size=(w.size, 7))  # general directions, in chunks
    op = CurvatureOperator(lik, w, eng, memory=3000)
    np.testing.assert_allclose(op.matmat(V), ref @ V, rtol=0, atol=1e-11 * np.abs(ref @ V).max())


def test_block_curvature_is_the_finite_difference_hessian():
    """Log-linear potentials: ``J^T C J`` is minus the Hessian of the log-likelihood; checked
    against central differences of the engine's gradient (relative to the largest entry)."""
    _, lik, eng, w = _problem(CHAINS, "loglinear", True)
    H = exact_fisher_matrix(lik, w, eng)
    h = 1e-5
    fd = np.stack([-(lik(w + h * e)[1] - lik(w - h * e)[1]) / (2 * h)
                   for e in np.eye(w.size)], axis=1)
    assert np.abs(H - fd).max() / np.abs(H).max() < 1e-6


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "edge-features"])
def test_chain_block_products_are_the_central_differences_of_the_gradient(shared):
    """The compiled chain pass (:func:`chain_covariance_block` through ``matmat``) on a block of
    random directions equals central differences of the engine's gradient along each direction
    (step 1e-5: truncation error about 5e-10 of the product here), to 1e-8 of the largest
    entry."""
    _, lik, eng, w = _problem(CHAINS, "loglinear", shared, seed=4)
    V = np.random.default_rng(6).normal(size=(w.size, 5))
    HV = CurvatureOperator(lik, w, eng).matmat(V)
    h = 1e-5
    fd = np.stack([-(lik(w + h * v)[1] - lik(w - h * v)[1]) / (2 * h) for v in V.T], axis=1)
    assert np.abs(HV - fd).max() / np.abs(HV).max() < 1e-8


def test_chain_block_equals_the_engine_covariance_product():
    """Table space: per-edge and shared directions against ``ChainEngine``'s tangent pass."""
    rng = np.random.default_rng(5)
    b, K = CHAINS, 4
    node = rng.normal(size=(b.n_total_nodes, K))
    edge = rng.normal(size=(b.n_edges, K, K))
    m = ChainEngine().marginals(b, node, edge)
    Vn = rng.normal(size=(b.n_total_nodes, K, 3))
    Ve = rng.normal(size=(b.n_edges, K, K, 3))
    Cn, Ce = chain_covariance_block(b, m.node, m.edge, Vn, Ve)
    Vs = rng.normal(size=(1, K, K, 3))
    Cn_s, Ce_s = chain_covariance_block(b, m.node, m.edge, Vn, Vs)
    for j in range(3):
        rn, re = ChainEngine().covariance_vector_product(b, node, edge, Vn[..., j], Ve[..., j])
        np.testing.assert_allclose(Cn[..., j], rn, atol=1e-12)
        np.testing.assert_allclose(Ce[..., j], re, atol=1e-12)
        ve = np.broadcast_to(Vs[..., j], edge.shape)
        rn, re = ChainEngine().covariance_vector_product(b, node, edge, Vn[..., j], ve)
        np.testing.assert_allclose(Cn_s[..., j], rn, atol=1e-12)
        np.testing.assert_allclose(Ce_s[0, ..., j], re.sum(axis=0), atol=1e-12)


def _dense_chain_crf(edges: bool, seed=3):
    """Dense features in [0, 1] with a bias column on chains of lengths 1 to 9, K = 5."""
    rng = np.random.default_rng(seed)
    batch = pmc.GraphBatch.chains([4, 9, 1, 6, 6, 2, 9, 3])
    N, K, F = batch.n_total_nodes, 5, 7
    X = np.concatenate([rng.random((N, F - 1)), np.ones((N, 1))], axis=1)
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, 1.0, shape=(F, K))
        T = pm.Normal("T", 0.0, 1.0, shape=(K, K)) if edges else None
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T,
                observed=rng.integers(0, K, N))
    p = weight_problem(m, "bethe_laplace")
    eng = exact_engine(p)
    return p.make_likelihood(eng), eng, rng.normal(0.0, 0.8, p.size)


@pytest.mark.parametrize("edges", [True, False], ids=["transitions", "node-only"])
def test_chain_pairwise_hessian_equals_finite_differences_and_the_block_path(edges):
    """The chain CRF Hessian from the label covariances of all position pairs (node block, and
    the transition-count covariances for the transition table) equals the central differences
    of the engine's gradient to 1e-6 and the column blocks of unit directions through the chain
    recursions to rounding, also when the chains are split into batches of a few chains (small
    memory budget)."""
    lik, eng, w = _dense_chain_crf(edges)
    H = exact_fisher_matrix(lik, w, eng)
    assert np.array_equal(H, H.T)
    h = 1e-5
    fd = np.stack([-(lik(w + h * e)[1] - lik(w - h * e)[1]) / (2 * h)
                   for e in np.eye(w.size)], axis=1)
    assert np.abs(H - fd).max() < 1e-6
    op = CurvatureOperator(lik, w, eng)
    block = op._chain_matmat(None, units=np.arange(w.size))
    np.testing.assert_allclose(H, 0.5 * (block + block.T), rtol=0, atol=1e-12 * np.abs(H).max())
    small = exact_fisher_matrix(lik, w, eng, memory=20000)
    np.testing.assert_allclose(small, H, rtol=0, atol=1e-12 * np.abs(H).max())


@pytest.mark.parametrize("case", ["loglinear-shared", "probit-features", "sparse-row"])
def test_chain_diagonal_is_exact(case):
    if case == "sparse-row":
        _, lik, eng, w = _sparse_row_crf("row")
    else:
        pot, shared = case.split("-")
        _, lik, eng, w = _problem(CHAINS, pot, shared == "shared")
    H = exact_fisher_matrix(lik, w, eng)
    for memory in (None, 3000):
        op = CurvatureOperator(lik, w, eng, **({} if memory is None else {"memory": memory}))
        np.testing.assert_allclose(curvature_diagonal(op), np.diag(H), rtol=1e-12,
                                   atol=1e-13 * np.abs(H).max())


def test_inverse_pd_and_its_refusal():
    rng = np.random.default_rng(0)
    M = rng.normal(size=(6, 6))
    A = M @ M.T + np.eye(6)
    np.testing.assert_allclose(inverse_pd(A) @ A, np.eye(6), atol=1e-12)
    with pytest.raises(ValueError, match="not positive definite.*smallest eigenvalue"):
        inverse_pd(A - 20 * np.eye(6), hint="; try something else")
    M = rng.normal(size=(700, 700))  # the lower triangle mirrored in more than one row block
    A = M @ M.T / 700 + np.eye(700)
    inv = inverse_pd(A)
    assert np.array_equal(inv, inv.T)
    np.testing.assert_allclose(inv @ A, np.eye(700), atol=1e-10)


def test_randomized_eigh_full_and_truncated():
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.normal(size=(40, 40)))
    vals = 100.0 * 0.5 ** np.arange(40)
    M = (Q * vals) @ Q.T
    lam, U, n = randomized_eigh(lambda V: M @ V, 40, 40, rng=0)
    np.testing.assert_allclose(lam, vals, rtol=1e-10, atol=1e-12)
    lam, U, n = randomized_eigh(lambda V: M @ V, 40, 5, oversample=10, power_iterations=2,
                                rng=0)
    np.testing.assert_allclose(lam, vals[:5], rtol=1e-8)
    assert n == 4
    np.testing.assert_allclose(np.abs(U.T @ Q[:, :5]), np.eye(5), atol=1e-6)


@pytest.mark.parametrize("potential,shared", [("loglinear", True), ("probit", False)])
def test_covariance_representations_against_the_dense_exact_covariance(potential, shared):
    """Dense and full-rank low-rank representations are exact (covariance, diagonal, log
    determinant, products, draws); a truncated rank and the diagonal approximation are not,
    and the truncated low-rank one is the closer of the two on the marginal variances here."""
    p, lik, eng, w = _problem(CHAINS, potential, shared)
    A = exact_fisher_matrix(lik, w, eng) + np.diag(1.0 / p.prior.sd**2)
    if potential == "probit":  # the probit's own curvature, as laplace_fit adds it
        from pymc_crf.fitters.bethe_laplace.curvature import potential_curvature
        m = eng.marginals(lik.batch, *lik.log_potentials(w))
        A = A - potential_curvature(lik, w, m.node, m.edge)
    Sigma = np.linalg.inv(A)
    v = np.random.default_rng(7).normal(size=w.size)
    if potential == "loglinear":
        for g in (laplace_covariance(lik, p.prior, w, "dense"),
                  laplace_covariance(lik, p.prior, w, "lowrank", rank=w.size, rng=0)):
            np.testing.assert_allclose(g.covariance(), Sigma, atol=1e-12 * np.abs(Sigma).max())
            np.testing.assert_allclose(g.diag(), np.diag(Sigma), rtol=1e-10)
            np.testing.assert_allclose(g.matvec(v), Sigma @ v, rtol=1e-9, atol=1e-12)
            assert g.logdet() == pytest.approx(-np.linalg.slogdet(A)[1], rel=1e-10)
            draws = g.sample(40000, rng=1)
            assert draws.shape == (40000, w.size)
            err = np.abs(np.cov(draws.T) - Sigma).max() / np.abs(Sigma).max()
            assert err < 0.05
        low = laplace_covariance(lik, p.prior, w, "lowrank", rank=5, rng=0)
        diag = laplace_covariance(lik, p.prior, w, "diagonal")
        e_low = np.abs(low.diag() / np.diag(Sigma) - 1).max()
        e_diag = np.abs(diag.diag() / np.diag(Sigma) - 1).max()
        assert 0 < e_low < e_diag
    # dense representation of any precision (probit included)
    g = DenseGaussian(w, A)
    np.testing.assert_allclose(g.covariance(), Sigma, atol=1e-12 * np.abs(Sigma).max())
    assert g.logdet() == pytest.approx(-np.linalg.slogdet(A)[1], rel=1e-10)


def test_laplace_fit_exact_covariance_unchanged():
    """``laplace_fit(covariance="exact")``: its precision is the finite-difference Hessian of
    the log posterior, its covariance the inverse, and its Cholesky factor gives the evidence's
    log det and draws with that covariance."""
    from pymc_crf.fitters.bethe_laplace import laplace_fit, laplace_log_evidence

    p, lik, eng, _ = _problem(CHAINS, "loglinear", True)
    fit = laplace_fit(p, map="exact", covariance="exact")
    h = 1e-5

    def grad(x):
        return lik(x)[1] + p.prior(x)[1]

    fd = -np.stack([(grad(fit.mean + h * e) - grad(fit.mean - h * e)) / (2 * h)
                    for e in np.eye(p.size)], axis=1)
    np.testing.assert_allclose(fit.precision, 0.5 * (fd + fd.T), atol=1e-6)
    np.testing.assert_allclose(fit.covariance @ fit.precision, np.eye(p.size), atol=1e-8)
    # the one Cholesky factor: of the precision, and the evidence's log det from it
    np.testing.assert_allclose(fit.cholesky @ fit.cholesky.T, fit.precision, atol=1e-12)
    np.testing.assert_allclose(laplace_log_evidence(fit),
                               laplace_log_evidence(replace(fit, cholesky=None)), atol=1e-10)
    draws = fit.gaussian().sample(20000, 1)
    np.testing.assert_allclose(np.cov(draws.T), fit.covariance,
                               atol=0.05 * np.abs(fit.covariance).max())


# ------------------------------------------------------------------ the implicit exact Gaussian
def _implicit_case(kind):
    if kind == "mrf":
        p = weight_problem(ising_grid_mrf(3, 40, 0, 1.0), "bethe_laplace")
        eng = exact_engine(p)
        lik = p.make_likelihood(eng)
        w = np.random.default_rng(2).normal(0.0, 0.3, p.size)
    else:
        batch = CHAINS if kind != "junction-tree" else TREES
        p, lik, eng, w = _problem(batch, "loglinear", kind == "chains-shared")
    sd = np.random.default_rng(3).uniform(0.5, 2.0, p.size)
    A = exact_fisher_matrix(lik, w, eng) + np.diag(sd**-2.0)
    return ImplicitGaussian(CurvatureOperator(lik, w, eng), sd, tol=1e-11), A


IMPLICIT_CASES = ["chains-shared", "chains-edge-features", "junction-tree", "mrf"]


@pytest.mark.parametrize("kind", IMPLICIT_CASES)
def test_implicit_gaussian_solves_with_the_exact_precision(kind):
    """``Sigma v`` by conjugate gradients equals the dense solve with ``A = J^T C J + P``."""
    g, A = _implicit_case(kind)
    V = np.random.default_rng(4).normal(size=(g.size, 3))
    np.testing.assert_allclose(A @ g.matvec(V), V, rtol=0, atol=1e-9 * np.abs(V).max())
    np.testing.assert_allclose(g.matvec(V[:, 0]), np.linalg.solve(A, V[:, 0]), rtol=1e-8,
                               atol=1e-12)


def _standardised_gap(x, target_cov, n):
    """Entrywise (empirical second moment - target) / its Monte Carlo sd, for draws x (n, d)
    of mean zero."""
    emp = x.T @ x / n
    se = np.sqrt((np.outer(np.diag(target_cov), np.diag(target_cov)) + target_cov**2) / n)
    return np.abs(emp - target_cov) / se


@pytest.mark.parametrize("kind", IMPLICIT_CASES)
def test_implicit_gaussian_perturbations_and_draws_have_the_exact_covariances(kind):
    """Perturbations have covariance ``A`` and the perturbation-optimisation draws covariance
    ``A^{-1}`` (within 6 Monte Carlo sds entrywise; the antithetic draws' mean is the mode)."""
    g, A = _implicit_case(kind)
    n = 20000
    b = g.perturbations(n, rng=5)
    assert _standardised_gap(b.T, A, n).max() < 6.0
    Sigma = np.linalg.inv(A)
    draws = g.sample(3000, rng=6)
    np.testing.assert_allclose(draws.mean(axis=0), g.mean, rtol=0, atol=1e-12)
    assert _standardised_gap(draws[::2] - g.mean, Sigma, 1500).max() < 6.0
    # a wrong covariance is caught: the draws are not those of the diagonal approximation
    assert _standardised_gap(draws[::2] - g.mean, np.diag(1.0 / np.diag(A)), 1500).max() > 6.0


@pytest.mark.parametrize("kind", ["chains-shared", "mrf"])
def test_implicit_gaussian_log_determinant_by_lanczos_quadrature(kind):
    """The stochastic Lanczos estimate of ``log det Sigma``: with as many steps as weights the
    quadrature is exact on every probe (it equals the probes' quadratic forms with the dense
    ``log A~``), the estimate is within 4 of its standard errors of the dense value, and with at
    least d probes (the unit vectors) it is the dense value."""
    g, A = _implicit_case(kind)
    exact = -np.linalg.slogdet(A)[1]
    est = g.logdet(probes=8, steps=g.size, rng=7)
    V = np.random.default_rng(7).choice([-1.0, 1.0], size=(g.size, 8))
    vals, vecs = np.linalg.eigh(g.sd[:, None] * A * g.sd[None, :])  # A~ = S A S
    log_At = (vecs * np.log(vals)) @ vecs.T
    forms = np.einsum("ij,ik,kj->j", V, log_At, V)
    np.testing.assert_allclose(est, -(forms.mean() - 2.0 * np.sum(np.log(g.sd))), rtol=1e-8)
    assert abs(est - exact) < 4 * g.logdet_se
    np.testing.assert_allclose(g.logdet(probes=64, steps=g.size), exact, rtol=1e-8)
    assert g.logdet_se == 0.0


@pytest.mark.parametrize("kind", ["chains-edge-features", "mrf"])
def test_implicit_gaussian_variance_estimate(kind):
    """Hutchinson's ``diag(Sigma)`` estimate: with the probes of ``rng`` it equals the dense
    ``sd^2 (1 - mean_z z * (A~^{-1} S H S z))`` with the mean clipped to [0, 1], the range of
    that diagonal, so every estimate lies in ``(0, sd^2]`` even where one probe's raw value
    falls outside it; many probes come within 5% of the dense diagonal."""
    g, A = _implicit_case(kind)
    Sigma = np.linalg.inv(A)
    H = A - np.diag(g.sd**-2.0)
    At = g.sd[:, None] * A * g.sd[None, :]
    for probes, seed in [(4, 8), (1, 8)]:
        Z = np.random.default_rng(seed).choice([-1.0, 1.0], size=(g.size, probes))
        X = np.linalg.solve(At, g.sd[:, None] * (H @ (g.sd[:, None] * Z)))
        raw = np.mean(Z * X, axis=1)
        est = g.variance_estimate(probes, rng=seed)
        np.testing.assert_allclose(est, g.sd**2 * (1.0 - np.clip(raw, 0.0, 1.0)), rtol=1e-8)
        assert np.all(est >= 0.0) and np.all(est <= g.sd**2 * (1 + 1e-12))
    assert np.any((raw < 0.0) | (raw > 1.0))  # one probe: some raw estimates out of range
    np.testing.assert_allclose(g.variance_estimate(4000, rng=9), np.diag(Sigma), rtol=0.05)


def test_lanczos_quadrature_rules_are_exact_for_low_degree_polynomials():
    """Each probe's m-step Gauss rule integrates ``z^T M^k z`` exactly for k <= 2m - 1 (Golub &
    Meurant): against the probes themselves (the same Rademacher draws); with ``d <= probes``
    the unit vectors and d steps give the exact ``log det``; the early stop ends the run at the
    first check after the estimate settles."""
    rng = np.random.default_rng(0)
    d, m = 60, 4
    G = rng.normal(size=(d, d))
    M = G @ G.T / d + np.diag(rng.uniform(0.5, 2.0, d))
    quad = lanczos_quadrature(lambda V: M @ V, d, probes=5, steps=m, rng=3)
    Z = np.random.default_rng(3).choice([-1.0, 1.0], size=(d, 5))
    for k in range(2 * m):
        ref = np.einsum("ij,ij->j", Z, np.linalg.matrix_power(M, k) @ Z)
        np.testing.assert_allclose(quad.estimates(lambda t, k=k: t**k), ref, rtol=1e-9)
    small = M[:6, :6]
    exact = lanczos_quadrature(lambda V: small @ V, 6, probes=8, steps=10)
    assert exact.exact and exact.standard_error(exact.estimates(np.log)) == 0.0
    np.testing.assert_allclose(exact.trace(np.log), np.linalg.slogdet(small)[1], rtol=1e-10)
    early = lanczos_quadrature(lambda V: M @ V, d, probes=5, steps=60, check=np.log, atol=1e-3)
    full = lanczos_quadrature(lambda V: M @ V, d, probes=5, steps=60)
    assert early.steps % 5 == 0 and early.steps < full.steps
    assert abs(early.trace(np.log) - full.trace(np.log)) < 1e-2
