"""Graph batches: the data model every layer above stands on."""

from pymc_crf.graphs.adjacency import MessageLayout, colour_classes, message_layout
from pymc_crf.graphs.batch import GraphBatch, GraphStructureError, as_graph_batch
from pymc_crf.graphs.junction_tree import JunctionTreeStructure, junction_tree, treewidth

__all__ = ["GraphBatch", "GraphStructureError", "JunctionTreeStructure", "MessageLayout",
           "as_graph_batch", "colour_classes", "junction_tree", "message_layout", "treewidth"]
