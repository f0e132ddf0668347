"""Bayesian CRFs by flattened power EP / transformed EP (Qi, Szummer & Minka 2005; thesis ch. 5).

Importing this package registers the fitters ``method="ep"`` and ``method="predictive_ard"`` and the
predictor ``predict(..., method="model_average")``.

Modules: :mod:`.moments` (exact tilted moments), :mod:`.gaussian` (low-rank Gaussian updates),
:mod:`.terms` (the factors of a batch), :mod:`.core` (the EP sweeps), :mod:`.average` (approximate
model averaging), :mod:`.fitter` (the registered fitter), :mod:`.predictor` (the registered
predictor), :mod:`.ard` and :mod:`.ard_fitter` (predictive ARD, thesis ch. 4).
"""

from pymc_crf.fitters.ep.ard_fitter import fit_predictive_ard
from pymc_crf.fitters.ep.core import EPRun, run_ep
from pymc_crf.fitters.ep.fitter import fit_ep
from pymc_crf.fitters.ep.predictor import predict_model_average
from pymc_crf.fitters.ep.terms import EPTerms, build_terms

__all__ = ["EPRun", "EPTerms", "build_terms", "fit_ep", "fit_predictive_ard",
           "predict_model_average", "run_ep"]
