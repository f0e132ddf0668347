"""pymc_crf: Bayesian conditional random fields for PyMC.

Likelihoods (``CRF``) backed by differentiable log-partition Ops over flat graph batches, exact and
approximate inference engines, registered fitters (``fit``), prediction (``predict``) and
comparison (``compare``) of posteriors.
"""

from pymc_crf import datasets, features, fitters, inference, metrics, plots, step_methods
from pymc_crf.compare import compare, cvm_score
from pymc_crf.datasets import CRFData
from pymc_crf.distributions import CRF, HCRF, MRF, pad_labels, unpad_labels
from pymc_crf.features import FeatureVectorizer
from pymc_crf.fitters import fit, log_marginal_likelihood
from pymc_crf.graphs import GraphBatch, GraphStructureError
from pymc_crf.impute import impute
from pymc_crf.inference import ApproximateInferenceWarning
from pymc_crf.ops import log_partition
from pymc_crf.predict import Prediction, predict

__version__ = "0.1.0"
__all__ = [
    "CRF",
    "HCRF",
    "MRF",
    "ApproximateInferenceWarning",
    "CRFData",
    "FeatureVectorizer",
    "GraphBatch",
    "GraphStructureError",
    "Prediction",
    "__version__",
    "compare",
    "cvm_score",
    "datasets",
    "features",
    "fit",
    "fitters",
    "impute",
    "inference",
    "log_marginal_likelihood",
    "log_partition",
    "metrics",
    "pad_labels",
    "plots",
    "predict",
    "step_methods",
    "unpad_labels",
]
