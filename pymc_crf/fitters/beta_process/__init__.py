"""The beta-process hidden CRF (Luo, Sun & Zhao) by mean-field variational EM.

Importing this package registers the fitter ``method="bp_hcrf_vi"`` and the predictor
``predict(..., method="bp_hcrf")``.

Modules: :mod:`.likelihood` (the data term of the bound), :mod:`.stick_breaking` (the beta-process
prior's factors), :mod:`.vi` (the coordinate-ascent updates), :mod:`.fitter` (the registered
fitter and the mapping of variational draws to the model's weights), :mod:`.predictor` (the
registered plug-in predictor).
"""

from pymc_crf.fitters.beta_process.fitter import fit_bp_hcrf_vi, plug_in_weights, sign_split
from pymc_crf.fitters.beta_process.predictor import predict_bp_hcrf

__all__ = ["fit_bp_hcrf_vi", "plug_in_weights", "predict_bp_hcrf", "sign_split"]
