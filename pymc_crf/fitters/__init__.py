"""Registered fitters (``pmc.fit(model, method=...)``) and their predictors."""

from pymc_crf.fitters import ensemble  # noqa: F401  (registers "bagging", "supergraph")
from pymc_crf.fitters.evidence import log_marginal_likelihood
from pymc_crf.fitters.laplace_proposal import LaplaceInit, laplace_init
from pymc_crf.fitters.registry import available, fit, load_builtin, register
from pymc_crf.model import predictors  # noqa: F401  (registers "average", "bpe", "map", ...)
from pymc_crf.model.random_field import (
    MRFLogLikelihood,
    MRFSpec,
    extract_mrf,
    extract_random_field,
    random_field_log_likelihood,
)
from pymc_crf.model.results import build_result
from pymc_crf.model.spec import CRFSpec, WeightSpec, extract_crf, require_gaussian_prior

load_builtin()

__all__ = ["CRFSpec", "LaplaceInit", "MRFLogLikelihood", "MRFSpec", "WeightSpec", "available",
           "build_result", "extract_crf", "extract_mrf", "extract_random_field", "fit",
           "laplace_init", "load_builtin", "log_marginal_likelihood", "random_field_log_likelihood",
           "register", "require_gaussian_prior"]
