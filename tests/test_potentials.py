import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from scipy.special import log_ndtr
from scipy.stats import norm

from pymc_crf.potentials import (
    POTENTIALS,
    gaussian_moments,
    get_potential,
    hcrf_pair_tables,
    log_ndtr_pt,
    log_potential,
    log_potential_pt,
)
from pymc_crf.potentials import log_ndtr as log_ndtr_nb


def test_probit_matches_definition_where_direct_formula_is_accurate():
    a = np.linspace(-6, 6, 101)
    for eps in (0.0, 0.01, 0.2):
        direct = np.log(eps + (1 - 2 * eps) * norm.cdf(a))  # Qi, Szummer & Minka 2005, eq. (4)
        np.testing.assert_allclose(log_potential(a, "probit", eps), direct, rtol=1e-12, atol=1e-15)


def test_pytensor_log_ndtr_tails_and_gradient():
    x = pt.dvector()
    f = pytensor.function([x], [log_ndtr_pt(x), pytensor.grad(log_ndtr_pt(x).sum(), x)])
    a = np.array([-1e3, -200.0, -38.0, -5.0, -1.0, -0.5, 0.0, 3.0, 9.0, 40.0])
    val, grad = f(a)
    np.testing.assert_allclose(val, log_ndtr(a), rtol=1e-13, atol=1e-300)
    # d/da log Phi(a) = phi(a) / Phi(a): the inverse Mills ratio, ~ -a in the left tail.
    expect = np.exp(norm.logpdf(a) - log_ndtr(a))
    np.testing.assert_allclose(grad, expect, rtol=1e-9)
    assert np.isfinite(val).all() and np.isfinite(grad).all()


@pytest.mark.parametrize("eps", [0.0, 0.05])
def test_robust_probit_bounded_and_finite(eps):
    x = pt.dvector()
    f = pytensor.function([x], log_potential_pt(x, "probit", eps))
    a = np.array([-1e6, -50.0, 0.0, 50.0, 1e6])
    out = f(a)
    assert np.isfinite(out[1:]).all()
    if eps > 0:
        assert np.all(out >= np.log(eps) - 1e-12) and np.all(out <= np.log1p(-eps) + 1e-12)
    np.testing.assert_allclose(out[1:], log_potential(a[1:], "probit", eps), rtol=1e-12)


def test_bad_potential_arguments():
    with pytest.raises(ValueError, match="potential must be"):
        log_potential(np.zeros(2), "softmax")
    with pytest.raises(ValueError, match="epsilon"):
        log_potential(np.zeros(2), "probit", 0.5)


# ---------------------------------------------------------------------------- the Potential kinds
@pytest.mark.parametrize("name,eps", [("loglinear", 0.0), ("probit", 0.0), ("probit", 0.1)])
def test_each_kind_numpy_pytensor_derivative_and_expectation(name, eps):
    """One definition per kind: the PyTensor form equals the numpy one, ``dlog`` equals central
    differences, and ``log_expected`` equals Gauss-Hermite quadrature of ``E[g(y)]``."""
    pot = get_potential(name)
    a = np.linspace(-30.0, 8.0, 77)
    x = pt.dvector()
    np.testing.assert_allclose(pytensor.function([x], pot.log_pt(x, eps))(a), pot.log(a, eps),
                               rtol=1e-12)
    h = 1e-5
    fd = (pot.log(a + h, eps) - pot.log(a - h, eps)) / (2 * h)
    d = pot.dlog(a, eps)
    np.testing.assert_allclose(np.ones_like(a) if d is None else d, fd, rtol=1e-6, atol=1e-9)
    z, wq = np.polynomial.hermite_e.hermegauss(150)
    for mean, var in ((0.3, 0.5), (-2.0, 2.0), (1.5, 0.1)):
        y = mean + np.sqrt(var) * z
        expect = np.log(np.sum(wq * np.exp(pot.log(y, eps))) / np.sqrt(2 * np.pi))
        np.testing.assert_allclose(pot.log_expected(mean, var, eps), expect, rtol=1e-9)
        # EP's moments: log Z and its first two derivatives in the mean, by quadrature
        logz, alpha, gamma = gaussian_moments(pot.code, mean, var, eps)
        np.testing.assert_allclose(logz, expect, rtol=1e-9)
        dz = [np.log(np.sum(wq * np.exp(pot.log(y + s, eps)))) for s in (-1e-4, 0.0, 1e-4)]
        np.testing.assert_allclose(alpha, (dz[2] - dz[0]) / 2e-4, rtol=1e-6)
        np.testing.assert_allclose(gamma, (dz[2] - 2 * dz[1] + dz[0]) / 1e-8, rtol=1e-3, atol=1e-4)


def test_numba_log_ndtr_matches_scipy_in_both_tails():
    for z in (-1e3, -200.0, -38.0, -30.5, -29.5, -5.0, 0.0, 4.9, 5.1, 9.0, 40.0):
        np.testing.assert_allclose(log_ndtr_nb(z), log_ndtr(np.float64(z)), rtol=1e-12)


def test_unknown_kind_and_registry():
    assert set(POTENTIALS) == {"loglinear", "probit"}
    assert get_potential("probit") is get_potential(get_potential("probit"))
    with pytest.raises(ValueError, match=r"potential must be one of \('loglinear', 'probit'\)"):
        get_potential("softmax")


def test_hcrf_pair_tables_numpy_equals_pytensor_and_definition():
    """Pair ``c * G + g``: node ``x_t theta_x + theta_y[:, c]``, edge ``theta_e[:, :, c]``."""
    rng = np.random.default_rng(0)
    N, E, F, S, C = 5, 3, 2, 3, 2
    X = rng.normal(size=(N, F))
    tx, ty, te = rng.normal(size=(F, S)), rng.normal(size=(S, C)), rng.normal(size=(S, S, C))
    node, edge = hcrf_pair_tables(X, tx, ty, te, E)
    for c in range(C):
        np.testing.assert_allclose(node[c * N:(c + 1) * N], X @ tx + ty[:, c])
        for e in range(E):
            np.testing.assert_allclose(edge[c * E + e], te[:, :, c])
    a, b, d = pt.dmatrix(), pt.dmatrix(), pt.dtensor3()
    f = pytensor.function([a, b, d], hcrf_pair_tables(X, a, b, d, E, backend=pt))
    n2, e2 = f(tx, ty, te)
    np.testing.assert_allclose(n2, node)
    np.testing.assert_allclose(e2, edge)
    assert hcrf_pair_tables(X, tx, ty, te, 0)[1].shape == (1, S, S)


def test_probit_second_derivative_far_in_the_lower_tail():
    # -a f' - f'^2 cancels for a << 0 (it gave -1.0083 at a = -3000 and -1.61 at -1e4); the
    # reference is the asymptotic series of the Mills ratio, accurate to rounding for x >= 100
    from pymc_crf.potentials import get_potential

    P = get_potential("probit")
    x = np.array([100.0, 3000.0, 1e4])
    r = 1 / x - 2 / x**3 + 10 / x**5 - 74 / x**7 + 706 / x**9
    np.testing.assert_allclose(P.d2log(-x), -(x + r) * r, rtol=1e-14)
    # elsewhere, and with label noise: the central difference of the first derivative
    a = np.linspace(-12.0, 8.0, 81)
    for eps in (0.0, 0.1, 1e-300):
        fd = (P.dlog(a + 1e-5, eps) - P.dlog(a - 1e-5, eps)) / 2e-5
        np.testing.assert_allclose(P.d2log(a, eps), fd, rtol=1e-7, atol=1e-9)
    # no jump where the continued fraction takes over
    for eps in (0.0, 0.2):
        left, right = P.d2log(np.array([-5.0 - 1e-12, -5.0 + 1e-12]), eps)
        assert abs(left - right) < 1e-11
