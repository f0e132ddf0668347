import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from scipy.special import log_ndtr
from scipy.stats import norm

from pymc_crf.potentials import log_ndtr_pt, log_potential, log_potential_pt


def test_probit_matches_definition_where_direct_formula_is_accurate():
    a = np.linspace(-6, 6, 101)
    for eps in (0.0, 0.01, 0.2):
        direct = np.log(eps + (1 - 2 * eps) * norm.cdf(a))  # 000 eq. (4)
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
