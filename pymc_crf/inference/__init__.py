"""Discrete inference engines behind one interface (see :mod:`pymc_crf.inference.base`)."""

from pymc_crf.inference.base import Engine, Marginals, MapResult, check_potentials
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.inference.chain import ChainEngine
from pymc_crf.inference.junction_tree import JunctionTree
from pymc_crf.inference.select import ApproximateInferenceWarning, get_engine

__all__ = ["ApproximateInferenceWarning", "BruteForce", "ChainEngine", "Engine", "JunctionTree",
           "Marginals", "MapResult", "check_potentials", "get_engine"]
