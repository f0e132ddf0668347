"""Registered fitters (``pmc.fit(model, method=...)``) and their predictors."""

from pymc_crf.fitters import predictors  # noqa: F401  (registers "average", "bpe", "map", ...)
from pymc_crf.fitters.random_field import (
    MRFLogLikelihood,
    MRFSpec,
    extract_mrf,
    extract_random_field,
    random_field_log_likelihood,
)
from pymc_crf.fitters.registry import available, fit, load_builtin, register
from pymc_crf.fitters.results import build_result
from pymc_crf.fitters.spec import CRFSpec, WeightSpec, extract_crf, require_gaussian_prior

load_builtin()

__all__ = ["CRFSpec", "MRFLogLikelihood", "MRFSpec", "WeightSpec", "available", "build_result",
           "extract_crf", "extract_mrf", "extract_random_field", "fit", "load_builtin",
           "random_field_log_likelihood", "register", "require_gaussian_prior"]
