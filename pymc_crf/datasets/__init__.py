"""Data sets that ship with pymc_crf (no downloads)."""

from pymc_crf.datasets.base import CRFData
from pymc_crf.datasets.bcrf_synthetic import bcrf_synthetic

__all__ = ["CRFData", "bcrf_synthetic"]
