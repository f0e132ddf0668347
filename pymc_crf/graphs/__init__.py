"""Graph batches: the data model every layer above stands on."""

from pymc_crf.graphs.batch import GraphBatch, GraphStructureError
from pymc_crf.graphs.junction_tree import JunctionTreeStructure, junction_tree, treewidth

__all__ = ["GraphBatch", "GraphStructureError", "JunctionTreeStructure", "junction_tree",
           "treewidth"]
