"""Data sets that ship with pymc_crf (no downloads)."""

from pymc_crf.datasets.base import CRFData
from pymc_crf.datasets.bcrf_synthetic import bcrf_synthetic
from pymc_crf.datasets.hmm_classes import hmm_classes
from pymc_crf.datasets.random_fields import MRFData, parise_welling_random_structure, welling_parise_grid

__all__ = ["CRFData", "MRFData", "bcrf_synthetic", "hmm_classes", "parise_welling_random_structure",
           "welling_parise_grid"]
