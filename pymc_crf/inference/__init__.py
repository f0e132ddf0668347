"""Discrete inference engines behind one interface (see :mod:`pymc_crf.inference.base`)."""

from pymc_crf.inference.base import Engine, Marginals, MapResult, check_potentials
from pymc_crf.inference.brute_force import BruteForce

__all__ = ["BruteForce", "Engine", "Marginals", "MapResult", "check_potentials"]
