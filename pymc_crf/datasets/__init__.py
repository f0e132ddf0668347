"""Data sets that ship with pymc_crf (no downloads)."""

from pymc_crf.datasets.base import CRFData
from pymc_crf.datasets.bcrf_synthetic import bcrf_synthetic
from pymc_crf.datasets.hmm_classes import hmm_classes

__all__ = ["CRFData", "bcrf_synthetic", "hmm_classes"]
