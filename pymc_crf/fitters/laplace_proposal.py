"""A random-walk proposal covariance and chain starts from the Bethe-Laplace approximation.

A random walk in tens of dimensions mixes only when its proposal has the posterior's scales and
correlations (Roberts, Gelman & Gilks 1997: covariance ``2.38^2 / d`` times the posterior's). The
Bethe-Laplace posterior ``N(lambda_MP, Sigma)`` (Welling & Parise 2006, eq. (7), with the
linear-response covariance of eqs. (8)-(10)) costs one MAP search with BP gradients and one
linear-response solve, far less than a tuning run, and exists exactly where the samplers are meant
for: graphs whose log Z is out of reach of exact inference. Its MAP (BL-BP, from a
pseudo-moment-matching start for MRFs) is also where the chains start, each at its own draw from
the Gaussian, so no tuning draws are spent travelling from the prior's centre.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pymc as pm

from pymc_crf.fitters.bethe_laplace.laplace import laplace_fit
from pymc_crf.fitters.bethe_laplace.problem import weight_problem
from pymc_crf.model.results import draws_from_gaussian

if TYPE_CHECKING:
    from pymc_crf.model.random_field import MRFSpec
    from pymc_crf.model.spec import CRFSpec

__all__ = ["LaplaceInit", "laplace_init"]


@dataclass
class LaplaceInit:
    """Mean (the MAP) and covariance of the Bethe-Laplace posterior in the flat weight order of
    the model's random-field likelihood, and the MAP mode that found them.

    Attributes
    ----------
    mean : ndarray (d,)
        The MAP.
    covariance : ndarray (d, d)
        The Bethe-Laplace posterior covariance.
    map : {"bp", "exact"}
        How the MAP was found (:func:`laplace_init`'s ``map``).
    spec : CRFSpec or MRFSpec
        The random field the flat order belongs to (``spec.unflatten`` names the weights).
    """

    mean: np.ndarray
    covariance: np.ndarray
    map: str
    spec: object

    def starts(self, chains: int, rng: np.random.Generator) -> list[dict[str, np.ndarray]]:
        """One start per chain (``pm.sample``'s ``initvals``): independent draws from the
        Gaussian, so chains start near the mode but apart (r-hat compares them)."""
        flat = draws_from_gaussian(self.mean, self.covariance, 1, int(chains), rng)[:, 0]
        return [self.spec.unflatten(f) for f in flat]


def laplace_init(model: pm.Model | None = None, map: str = "bp",
                 spec: CRFSpec | MRFSpec | None = None) -> LaplaceInit:
    """Bethe-Laplace mean and covariance of the random-field weights of ``model``.

    Parameters
    ----------
    model : pm.Model, optional
        A model whose only free variables are the weights of one ``pmc.CRF`` / ``pmc.MRF`` with
        fixed Normal priors (what ``method="bethe_laplace"`` accepts).
    map : {"bp", "exact"}
        MAP by BP gradients (BL-BP, default: available on any graph) or exact gradients (BL-MP);
        the same on forests, where BP is exact (both then run on the exact engine).
    spec : CRFSpec or MRFSpec, optional
        The model's random field as the caller read it (:func:`~pymc_crf.model.extract_random_field`),
        else read here.

    Raises
    ------
    ValueError
        When the Bethe-Laplace approximation does not apply to the model (other free or observed
        variables, non-Normal priors, HCRFs) or its covariance is not positive definite.
    """
    model = pm.modelcontext(model)
    try:
        problem = weight_problem(model, "bethe_laplace", spec=spec)
        fit = laplace_fit(problem, map=map, covariance="bp")
    except ValueError as err:
        raise ValueError(f"no Bethe-Laplace proposal for this model: {err}") from err
    return LaplaceInit(fit.mean, fit.covariance, map, problem.spec)
