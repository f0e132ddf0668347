"""The unbounded L-BFGS (fitters/lbfgs.py) against closed forms and scipy's L-BFGS-B."""

import numpy as np
import pytest
from scipy.optimize import minimize

from pymc_crf.fitters.lbfgs import lbfgs


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


def test_stops_on_ftol_and_maxiter():
    fun, d = _logistic(np.random.default_rng(2))
    loose = lbfgs(fun, np.zeros(d), ftol=1e-3, gtol=0.0)
    assert loose.success and "REDUCTION" in loose.message
    capped = lbfgs(fun, np.zeros(d), maxiter=2, ftol=0.0, gtol=0.0)
    assert not capped.success and capped.nit == 2


def test_non_finite_start_is_refused():
    with pytest.raises(ValueError, match="not finite at the starting point"):
        lbfgs(lambda x: (np.inf, x), np.zeros(2))
