"""pymc_crf: Bayesian conditional random fields for PyMC."""

from pymc_crf.graphs import GraphBatch, GraphStructureError

__version__ = "0.1.0"
__all__ = ["GraphBatch", "GraphStructureError", "__version__"]
