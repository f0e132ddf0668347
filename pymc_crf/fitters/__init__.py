"""Registered fitters: ``pmc.fit(model, method=...)``."""

from pymc_crf.fitters import map as _map  # noqa: F401  (registers "map")
from pymc_crf.fitters import nuts as _nuts  # noqa: F401  (registers "nuts")
from pymc_crf.fitters.random_field import (
    MRFLogLikelihood,
    MRFSpec,
    extract_mrf,
    extract_random_field,
    random_field_log_likelihood,
)
from pymc_crf.fitters.registry import available, fit, register
from pymc_crf.fitters.results import build_result
from pymc_crf.fitters.spec import CRFSpec, WeightSpec, extract_crf, require_gaussian_prior

__all__ = ["CRFSpec", "MRFLogLikelihood", "MRFSpec", "WeightSpec", "available", "build_result",
           "extract_crf", "extract_mrf", "extract_random_field", "fit", "random_field_log_likelihood",
           "register", "require_gaussian_prior"]
