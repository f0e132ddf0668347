"""Graph batches: the data model every layer above stands on."""

from pymc_crf.graphs.batch import GraphBatch, GraphStructureError

__all__ = ["GraphBatch", "GraphStructureError"]
