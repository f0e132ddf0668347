"""The weight-space layer: a random-field likelihood read back from a PyMC model, as functions of
the flat weights, and the results and predictions built on it.

- :mod:`~pymc_crf.model.spec`: ``extract_crf`` reads a ``pmc.CRF`` (or HCRF) node into a
  :class:`CRFSpec` (weights, features, labels, the flat weight order);
- :mod:`~pymc_crf.model.random_field`: ``extract_random_field`` gives CRF and MRF models one
  weight-space interface (``MRFSpec`` for ``pmc.MRF``);
- :mod:`~pymc_crf.model.objective`: the CRF log-likelihood and Gaussian log prior of the flat
  weights, straight from the engine;
- :mod:`~pymc_crf.model.results`: ``build_result``, the ``DataTree`` every fitter returns, and the
  layout attrs that let ``pmc.predict`` work without the model;
- :mod:`~pymc_crf.model.predictors` and :mod:`~pymc_crf.model.prediction_group`: the predictor
  registry and the ``predictions`` group;
- :mod:`~pymc_crf.model.options`: the check of a fitter's or predictor's option names.

The fitters (:mod:`pymc_crf.fitters`) and step methods (:mod:`pymc_crf.step_methods`) sit above
this layer and read the model through it; it imports neither.
"""

from pymc_crf.model.random_field import (
    MRFLogLikelihood,
    MRFSpec,
    extract_mrf,
    extract_random_field,
    random_field_log_likelihood,
)
from pymc_crf.model.results import build_result
from pymc_crf.model.spec import CRFSpec, WeightSpec, extract_crf, require_gaussian_prior

__all__ = ["CRFSpec", "MRFLogLikelihood", "MRFSpec", "WeightSpec", "build_result", "extract_crf",
           "extract_mrf", "extract_random_field", "random_field_log_likelihood",
           "require_gaussian_prior"]
