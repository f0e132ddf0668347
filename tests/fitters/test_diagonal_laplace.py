"""The diagonal Laplace sds under other prior sds, and the MAP searches' coordinates."""

import numpy as np
import pymc as pm
import pytest

import pymc_crf as pmc
from pymc_crf.features import sequence_batch
from pymc_crf.fitters.bethe_laplace.problem import weight_problem
from pymc_crf.fitters.diagonal_laplace import (
    diagonal_laplace_sd,
    implied_fisher,
    rescaled_laplace_sd,
    search_gtol,
    search_scale,
)


def _spec(node_sd: float, edge_sd: float):
    rng = np.random.default_rng(0)
    lengths = [3, 1, 4, 2]
    X = rng.normal(size=(sum(lengths), 3))
    y = rng.integers(0, 3, size=sum(lengths))
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, node_sd, shape=(3, 3))
        T = pm.Normal("T", 0.0, edge_sd, shape=(3, 3))
        pmc.CRF("y", graphs=sequence_batch(lengths), node_features=X, node_weights=W,
                edge_weights=T, observed=y)
    return weight_problem(m, "laplace").spec


def test_rescaled_laplace_sds_are_those_computed_under_the_new_prior():
    """The likelihood's diagonal curvature at a point does not depend on the prior, so the sds
    predicted from one prior's are the sds computed under the other's, at the same point."""
    a, b = _spec(0.7, 1.3), _spec(2.5, 0.2)
    w = np.random.default_rng(1).normal(size=a.flat_size)
    sd_a = diagonal_laplace_sd(a, w, shared_table="fisher")
    sd_b = diagonal_laplace_sd(b, w, shared_table="fisher")
    prior_a = np.r_[np.full(9, 0.7), np.full(9, 1.3)]
    prior_b = np.r_[np.full(9, 2.5), np.full(9, 0.2)]
    np.testing.assert_allclose(rescaled_laplace_sd(sd_a, prior_a, prior_b), sd_b, rtol=1e-12)
    np.testing.assert_allclose(implied_fisher(sd_a, prior_a), implied_fisher(sd_b, prior_b),
                               rtol=1e-9)


@pytest.mark.parametrize("laplace", [0.0, np.inf, np.nan, 2.0])
def test_unrecoverable_curvature_is_predicted_as_the_prior_alone(laplace):
    """A Laplace sd of 0 or not finite, or one above its prior sd (rounding), says nothing about
    the curvature: the prediction is the new prior sd."""
    out = rescaled_laplace_sd(np.array([laplace]), np.array([1.0]), np.array([0.3]))
    np.testing.assert_allclose(out, [0.3])


def test_search_scale_is_the_geometric_mean_or_the_prior_sds():
    sd, lap = np.array([1.0, 4.0]), np.array([0.25, 1.0])
    np.testing.assert_allclose(search_scale(sd, lap), [0.5, 2.0])
    assert search_scale(sd) is sd
    # Laplace sds (1/4, 1) under the prior sds (1, 4) imply the curvatures 15 and 15/16; under
    # the prior sds (2, 1) they give 1/sqrt(15 + 1/4) and 1/sqrt(15/16 + 1)
    new = np.array([2.0, 1.0])
    lap_new = 1.0 / np.sqrt(np.array([15.0 + 0.25, 15.0 / 16.0 + 1.0]))
    np.testing.assert_allclose(search_scale(new, lap, sd), np.sqrt(new * lap_new), rtol=1e-14)


def test_search_gtol_bounds_the_prior_whitened_gradient():
    """A gradient in the coordinates ``(w - mu) / scale`` whose largest entry is the returned
    tolerance has prior-whitened entries at most ``gtol``."""
    rng = np.random.default_rng(3)
    sd = rng.uniform(0.1, 2.0, size=50)
    scale = sd * rng.uniform(0.05, 1.0, size=50)
    tol = search_gtol(1e-6, sd, scale)
    g_w = rng.normal(size=50)
    g_search = scale * g_w
    g_w *= tol / np.max(np.abs(g_search))  # the largest search-coordinate entry at tol
    assert np.max(np.abs(sd * g_w)) <= 1e-6 * (1 + 1e-12)
    assert tol == pytest.approx(1e-6 * np.min(scale / sd))
    assert search_gtol(1e-6, sd, sd) == 1e-6
