"""PyMC distributions: CRF and hidden-CRF likelihoods."""

from pymc_crf.distributions.crf import CRF, CRFRV, crf_log_potentials, pad_labels, unpad_labels
from pymc_crf.distributions.hcrf import HCRF

__all__ = ["CRF", "CRFRV", "HCRF", "crf_log_potentials", "pad_labels", "unpad_labels"]
