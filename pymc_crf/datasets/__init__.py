"""Data sets that ship with pymc_crf (no downloads).

Generators are functions (``bcrf_synthetic``, ``hmm_classes``) in modules named for their source
(:mod:`.bcrf`, :mod:`.hmm`), so a module never hides behind the function it defines.
"""

from pymc_crf.datasets.base import CRFData
from pymc_crf.datasets.bcrf import bcrf_synthetic
from pymc_crf.datasets.hmm import SequenceData, hmm_classes

__all__ = ["CRFData", "SequenceData", "bcrf_synthetic", "hmm_classes"]
