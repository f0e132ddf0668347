"""The unbounded L-BFGS (fitters/lbfgs.py) against closed forms and scipy's L-BFGS-B."""

import numpy as np
import pytest
from scipy.optimize import minimize

from pymc_crf.fitters.lbfgs import _direction, lbfgs


def _logistic(rng, n=200, d=15):
    """L2-penalised logistic regression: strictly convex, minimum known only numerically."""
    X = rng.normal(size=(n, d))
    y = (rng.random(n) < 0.5).astype(float)

    def fun(w):
        a = X @ w
        f = np.sum(np.logaddexp(0.0, a) - y * a) + 0.5 * w @ w
        g = X.T @ (1.0 / (1.0 + np.exp(-a)) - y) + w
        return f, g
    return fun, d


def test_quadratic_minimum():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(20, 20))
    H = A @ A.T / 20 + np.eye(20)  # condition number ~10
    b = rng.normal(size=20)
    res = lbfgs(lambda x: (0.5 * x @ H @ x - b @ x, H @ x - b), np.zeros(20), gtol=1e-10,
                ftol=0.0)
    assert res.success
    np.testing.assert_allclose(res.x, np.linalg.solve(H, b), atol=1e-8)
    assert res.nit == len(res.trace) and res.nfev >= res.nit


def test_logistic_matches_scipy_lbfgsb():
    fun, d = _logistic(np.random.default_rng(1))
    ours = lbfgs(fun, np.zeros(d), gtol=1e-9, ftol=0.0)
    ref = minimize(fun, np.zeros(d), jac=True, method="L-BFGS-B",
                   options={"gtol": 1e-9, "ftol": 0.0, "maxiter": 1000})
    np.testing.assert_allclose(ours.x, ref.x, atol=1e-7)
    assert ours.fun == pytest.approx(ref.fun, rel=1e-12)


@pytest.mark.parametrize("n_pairs", [0, 1, 4])
def test_direction_is_minus_the_bfgs_inverse_hessian_times_the_gradient(n_pairs):
    """The two-loop recursion against the dense BFGS inverse-Hessian updates (Nocedal & Wright
    2006, eq. (6.17)) from H0 = (s'y / y'y) I of the newest pair (their eq. (7.20))."""
    rng = np.random.default_rng(n_pairs)
    d = 9
    A = rng.normal(size=(d, d))
    H = A @ A.T + np.eye(d)
    pairs = []
    for _ in range(n_pairs):
        s = rng.normal(size=d)
        y = H @ s  # s'y > 0, as the optimiser stores them
        pairs.append((s, y, 1.0 / (s @ y)))
    g = rng.normal(size=d)
    Hk = np.eye(d)
    if pairs:
        s, y, _ = pairs[-1]
        Hk *= (s @ y) / (y @ y)
    for s, y, rho in pairs:
        V = np.eye(d) - rho * np.outer(y, s)
        Hk = V.T @ Hk @ V + rho * np.outer(s, s)
    g0 = g.copy()
    got = _direction(g, pairs)
    np.testing.assert_allclose(got, -Hk @ g0, rtol=1e-12, atol=1e-12 * np.abs(Hk @ g0).max())
    np.testing.assert_array_equal(g, g0)  # the gradient is not updated in place


def test_stops_on_ftol_and_maxiter():
    fun, d = _logistic(np.random.default_rng(2))
    loose = lbfgs(fun, np.zeros(d), ftol=1e-3, gtol=0.0)
    assert loose.success and "REDUCTION" in loose.message
    capped = lbfgs(fun, np.zeros(d), maxiter=2, ftol=0.0, gtol=0.0)
    assert not capped.success and capped.nit == 2


def test_non_finite_start_is_refused():
    with pytest.raises(ValueError, match="not finite at the starting point"):
        lbfgs(lambda x: (np.inf, x), np.zeros(2))
