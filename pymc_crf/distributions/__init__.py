"""PyMC distributions: CRF likelihoods."""

from pymc_crf.distributions.crf import CRF, CRFRV, crf_log_potentials, pad_labels, unpad_labels

__all__ = ["CRF", "CRFRV", "crf_log_potentials", "pad_labels", "unpad_labels"]
