"""Bethe-Laplace approximation of random-field weight posteriors (Welling & Parise 2006)."""

from pymc_crf.fitters.bethe_laplace.fitter import fit_bethe_laplace
from pymc_crf.fitters.bethe_laplace.laplace import LaplaceFit, laplace_fit, laplace_log_evidence
from pymc_crf.fitters.bethe_laplace.problem import WeightProblem, weight_problem

__all__ = ["LaplaceFit", "WeightProblem", "fit_bethe_laplace", "laplace_fit",
           "laplace_log_evidence", "weight_problem"]
