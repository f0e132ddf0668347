"""Registered fitters (``pmc.fit(model, method=...)``) and their predictors."""

from pymc_crf.fitters import predictors  # noqa: F401  (registers "average", "bpe", "map", ...)
from pymc_crf.fitters.registry import available, fit, load_builtin, register
from pymc_crf.fitters.results import build_result
from pymc_crf.fitters.spec import CRFSpec, WeightSpec, extract_crf, require_gaussian_prior

load_builtin()

__all__ = ["CRFSpec", "WeightSpec", "available", "build_result", "extract_crf", "fit",
           "load_builtin", "register", "require_gaussian_prior"]
