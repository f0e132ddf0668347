"""Data sets that ship with pymc_crf (no downloads).

Generators are functions (``bcrf_synthetic``, ``hmm_classes``) in modules named for their source
(:mod:`.bcrf`, :mod:`.hmm`), so a module never hides behind the function it defines.
"""

from pymc_crf.datasets.base import CRFData
from pymc_crf.datasets.bcrf import bcrf_synthetic
from pymc_crf.datasets.hmm import SequenceData, hmm_classes
from pymc_crf.datasets.japanese_vowels import japanese_vowels
from pymc_crf.datasets.random_fields import MRFData, parise_welling_random_structure, welling_parise_grid

__all__ = ["CRFData", "MRFData", "SequenceData", "bcrf_synthetic", "hmm_classes",
           "japanese_vowels", "parise_welling_random_structure", "welling_parise_grid"]
