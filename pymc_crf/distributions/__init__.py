"""PyMC distributions: CRF, hidden-CRF and MRF likelihoods."""

from pymc_crf.distributions.crf import CRF, CRFRV, crf_log_potentials, pad_labels, unpad_labels
from pymc_crf.distributions.hcrf import HCRF
from pymc_crf.distributions.mrf import MRF, MRFRV

__all__ = ["CRF", "CRFRV", "HCRF", "MRF", "MRFRV", "crf_log_potentials", "pad_labels", "unpad_labels"]
