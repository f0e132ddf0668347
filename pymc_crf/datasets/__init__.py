"""Data sets that ship with pymc_crf (no downloads), and readers of the shared real text data
(:mod:`.text`: CoNLL-2000 chunking, the Penn Treebank POS sample, CRFsuite's feature template).

Generators are functions (``bcrf_synthetic``, ``hmm_classes``) in modules named for their source
(:mod:`.bcrf`, :mod:`.hmm`), so a module never hides behind the function it defines.
"""

from pymc_crf.datasets.base import CRFData
from pymc_crf.datasets.bcrf import bcrf_model, bcrf_synthetic
from pymc_crf.datasets.hmm import SequenceData, hmm_classes
from pymc_crf.datasets.japanese_vowels import japanese_vowels
from pymc_crf.datasets.random_fields import MRFData, parise_welling_random_structure, welling_parise_grid
from pymc_crf.datasets.text import data_dir, read_conll2000, read_ptb_sample, token_features

__all__ = ["CRFData", "MRFData", "SequenceData", "bcrf_model", "bcrf_synthetic", "data_dir", "hmm_classes",
           "japanese_vowels", "parise_welling_random_structure", "read_conll2000",
           "read_ptb_sample", "token_features", "welling_parise_grid"]
