"""Discrete inference engines behind one interface (see :mod:`pymc_crf.inference.base`)."""

from pymc_crf.inference.base import (
    ApproximateInferenceWarning,
    ConvergenceWarning,
    Engine,
    LoopyResult,
    MapResult,
    Marginals,
    check_potentials,
)
from pymc_crf.inference.bp import BeliefPropagation
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.inference.chain import ChainEngine
from pymc_crf.inference.gibbs import Gibbs
from pymc_crf.inference.junction_tree import JunctionTree
from pymc_crf.inference.linear_response import (
    linear_response_matrix,
    linear_response_vector_product,
)
from pymc_crf.inference.loopy import LoopyEngine
from pymc_crf.inference.mean_field import MeanField
from pymc_crf.inference.select import get_engine
from pymc_crf.inference.tree_ep import TreeEP

__all__ = ["ApproximateInferenceWarning", "BeliefPropagation", "BruteForce", "ChainEngine",
           "ConvergenceWarning", "Engine", "Gibbs", "JunctionTree", "LoopyEngine", "LoopyResult",
           "Marginals", "MapResult", "MeanField", "TreeEP", "check_potentials", "get_engine",
           "linear_response_matrix", "linear_response_vector_product"]
