"""The weight-space problem a Laplace approximation works on: likelihood, prior and engines.

One path for CRF and MRF models: the likelihood object (``CRFLogLikelihood`` or its MRF twin) gives
the value and gradient of ``log p(D | w)`` and the maps between weights and log-potential tables
(``pushforward`` / ``pullback``), so everything here is written once for both.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pymc as pm

from pymc_crf.distributions.hcrf import HCRFRV
from pymc_crf.inference.base import Engine
from pymc_crf.inference.bp import BeliefPropagation
from pymc_crf.inference.select import get_engine
from pymc_crf.model.objective import GaussianLogPrior
from pymc_crf.model.random_field import extract_random_field, random_field_log_likelihood
from pymc_crf.model.spec import (
    free_scales,
    observes,
    refuse_free_scales,
    require_all_labels,
    require_gaussian_prior,
    require_learnable_scales,
    require_sole_likelihood,
    with_scales,
)

__all__ = ["WeightProblem", "weight_problem", "exact_engine", "bp_engine"]


def _refuse_hcrf(model: pm.Model, method: str) -> None:
    if not observes(model, HCRFRV):
        return
    if method in ("bethe_laplace", "laplace"):
        why = ("the hidden-variable Bethe-Laplace approximation (Welling & Parise 2006, eqs. "
               "17-22) needs the MAP of the contrastive Bethe free energy to keep its covariance "
               "positive definite, which is not implemented")
    else:
        why = ("its data perturbation is that of a fully observed log-linear likelihood, whose "
               "Hessian is the covariance of its sufficient statistics; an HCRF's hidden states "
               "break that (and make the objective non-concave)")
    raise ValueError(
        f"method={method!r} does not handle hidden-variable models (pmc.HCRF): {why}. Use "
        "method='nuts', 'map' or 'bp_hcrf_vi' for HCRFs.")


@dataclass
class WeightProblem:
    """A random-field likelihood in its flat weights with a fixed independent Normal prior.

    ``make_likelihood(engine)`` builds the likelihood object on a chosen engine (exact or BP);
    ``n_data`` is the number of independent observations (graphs of a CRF, samples of an MRF).
    """

    model: pm.Model
    spec: Any
    prior: GaussianLogPrior
    make_likelihood: Any
    n_data: int
    kind: str
    scales: list = field(default_factory=list)
    scale_index: Any = None

    @property
    def n_scales(self) -> int:
        """Entries of the flat vector of learned prior scales (0: every sd is fixed)."""
        return int(sum(v.size for v in self.scales))

    def at_scales(self, values: np.ndarray) -> WeightProblem:
        """The same problem with the learned scales fixed at ``values`` (flat scale vector): its
        prior is the fixed Normal with those sds."""
        spec = with_scales(self.spec, values)
        return replace(self, spec=spec, prior=GaussianLogPrior(spec))

    @property
    def size(self) -> int:
        return int(self.spec.flat_size)

    @property
    def batch(self):
        return self.spec.batch

    @property
    def potential(self) -> str:
        return getattr(self.spec, "potential", "loglinear")


def weight_problem(model: pm.Model | None, method: str, learn_scales: bool = False,
                   spec=None) -> WeightProblem:
    """Read the model's CRF or MRF likelihood and its Gaussian weight prior (clear errors else).

    With ``learn_scales`` the weights' prior sds may be free scale variables (``free_scales``):
    the problem's ``prior`` is then at unit scales until ``at_scales`` fixes them; without it such
    a model is refused (``refuse_free_scales``). ``spec``: the model's random field as the caller
    read it (``extract_random_field``), else read here."""
    model = pm.modelcontext(model)
    _refuse_hcrf(model, method)
    if spec is None:
        spec = extract_random_field(model)
    scales, scale_index = free_scales(spec) if learn_scales else ([], None)
    if scales:
        require_learnable_scales(spec, method)
    else:
        refuse_free_scales(spec, method)
        require_gaussian_prior(spec, method)
    require_all_labels(spec, method)
    require_sole_likelihood(spec, method)
    n_data = int(getattr(spec, "n_samples", spec.batch.n_graphs))
    kind = "mrf" if hasattr(spec, "n_samples") else "crf"

    def make(engine: Engine | None = None):
        return random_field_log_likelihood(spec, engine)

    fixed = with_scales(spec, np.ones(sum(v.size for v in scales)))
    return WeightProblem(model, spec, GaussianLogPrior(fixed), make, n_data, kind, scales,
                         scale_index)


def exact_engine(problem: WeightProblem,
                 hint: str = "use map='bp' and covariance='bp'") -> Engine:
    """The model's engine when it is exact, else the junction tree (a clear error if too wide,
    ending with the caller's ``hint``: what to use instead)."""
    engine = problem.make_likelihood().engine
    if engine.exact:
        return engine
    try:
        return get_engine("junction_tree", problem.batch)
    except ValueError as err:
        raise ValueError(f"exact inference is not possible on this graph ({err}); {hint}") \
            from err


def bp_engine(bp: BeliefPropagation | None, warn: bool = False) -> BeliefPropagation:
    """A BP engine for the Bethe quantities: the one given, or tight defaults."""
    if bp is None:
        return BeliefPropagation(damping=0.5, tol=1e-11, max_iter=5000, warn=warn)
    if not isinstance(bp, BeliefPropagation):
        raise ValueError(f"bp must be a BeliefPropagation engine; got {type(bp).__name__}")
    return bp
