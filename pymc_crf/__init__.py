"""pymc_crf: Bayesian conditional random fields for PyMC.

Likelihoods (``CRF``) backed by differentiable log-partition Ops over flat graph batches, exact and
approximate inference engines, registered fitters (``fit``), prediction (``predict``) and
comparison (``compare``) of posteriors.

The public names are imported on first use (PEP 562), so that ``import pymc_crf`` and the
``pymc-crf`` command start at once: PyMC, ArviZ and numba take many seconds to import.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pymc_crf import (
        calibration,
        datasets,
        distributed,
        features,
        fitters,
        inference,
        metrics,
        plots,
        queries,
        step_methods,
    )
    from pymc_crf.compare import compare, cvm_score
    from pymc_crf.datasets import CRFData
    from pymc_crf.distributions import CRF, HCRF, MRF, pad_labels, unpad_labels
    from pymc_crf.features import FeatureVectorizer
    from pymc_crf.fitters import fit, log_marginal_likelihood
    from pymc_crf.graphs import GraphBatch, GraphStructureError
    from pymc_crf.impute import impute
    from pymc_crf.inference import ApproximateInferenceWarning, ConvergenceWarning
    from pymc_crf.loo import loo
    from pymc_crf.ops import log_partition
    from pymc_crf.predict import Prediction, predict
    from pymc_crf.queries import prior_from
    from pymc_crf.tagger import CRFTagger
    from pymc_crf.threads import get_num_threads, set_num_threads

#: where each public name lives (a subpackage is its own entry)
_LAZY = {
    "calibration": "pymc_crf.calibration",
    "datasets": "pymc_crf.datasets",
    "distributed": "pymc_crf.distributed",
    "features": "pymc_crf.features",
    "metrics": "pymc_crf.metrics",
    "FeatureVectorizer": "pymc_crf.features",
    "CRFTagger": "pymc_crf.tagger",
    "impute": "pymc_crf.impute",
    "fitters": "pymc_crf.fitters",
    "inference": "pymc_crf.inference",
    "plots": "pymc_crf.plots",
    "step_methods": "pymc_crf.step_methods",
    "compare": "pymc_crf.compare",
    "cvm_score": "pymc_crf.compare",
    "CRFData": "pymc_crf.datasets",
    "CRF": "pymc_crf.distributions",
    "HCRF": "pymc_crf.distributions",
    "MRF": "pymc_crf.distributions",
    "pad_labels": "pymc_crf.distributions",
    "unpad_labels": "pymc_crf.distributions",
    "fit": "pymc_crf.fitters",
    "log_marginal_likelihood": "pymc_crf.fitters",
    "GraphBatch": "pymc_crf.graphs",
    "GraphStructureError": "pymc_crf.graphs",
    "ApproximateInferenceWarning": "pymc_crf.inference",
    "ConvergenceWarning": "pymc_crf.inference",
    "log_partition": "pymc_crf.ops",
    "loo": "pymc_crf.loo",
    "Prediction": "pymc_crf.predict",
    "predict": "pymc_crf.predict",
    "prior_from": "pymc_crf.queries",
    "queries": "pymc_crf.queries",
    "get_num_threads": "pymc_crf.threads",
    "set_num_threads": "pymc_crf.threads",
}

__version__ = "0.1.0"
__all__ = [
    "CRF",
    "HCRF",
    "MRF",
    "ApproximateInferenceWarning",
    "CRFData",
    "CRFTagger",
    "ConvergenceWarning",
    "FeatureVectorizer",
    "GraphBatch",
    "GraphStructureError",
    "Prediction",
    "__version__",
    "calibration",
    "compare",
    "cvm_score",
    "datasets",
    "distributed",
    "features",
    "fit",
    "fitters",
    "get_num_threads",
    "impute",
    "inference",
    "log_marginal_likelihood",
    "log_partition",
    "loo",
    "metrics",
    "pad_labels",
    "plots",
    "predict",
    "prior_from",
    "queries",
    "set_num_threads",
    "step_methods",
    "unpad_labels",
]


#: public subpackages; every other name in _LAZY is an attribute of its module
_SUBPACKAGES = {"calibration", "datasets", "distributed", "features", "fitters", "inference", "metrics",
                "plots", "queries", "step_methods"}


def __getattr__(name: str):
    """Import a public name on first use (``pmc.fit``, ``pmc.CRF``, ``pmc.datasets`` ...)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'pymc_crf' has no attribute {name!r}")
    module = importlib.import_module(_LAZY[name])
    value = module if name in _SUBPACKAGES else getattr(module, name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """``pmc.predict`` and ``pmc.compare`` are functions named like their modules: importing the
    module ``pymc_crf.predict`` binds it as an attribute of the package, which would hide the
    function, so that binding is skipped (the module stays in ``sys.modules``)."""

    def __setattr__(self, name: str, value) -> None:
        if (name in _LAZY and name not in _SUBPACKAGES and isinstance(value, types.ModuleType)):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
