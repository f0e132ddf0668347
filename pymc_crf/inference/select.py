"""Engine selection: ``inference="auto"`` picks chain, then junction tree, then loopy BP."""

from __future__ import annotations

import warnings

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import Engine

__all__ = ["ENGINE_NAMES", "ApproximateInferenceWarning", "get_engine"]

ENGINE_NAMES = ("auto", "chain", "junction_tree", "bp", "bethe", "tree_ep", "mean_field", "gibbs",
                "brute_force")
DEFAULT_MAX_TREEWIDTH = 10


class ApproximateInferenceWarning(UserWarning):
    """log Z is approximate (Bethe / loopy BP): the likelihood and its posterior are approximate."""


def _make(name: str, max_treewidth: int) -> Engine:
    if name == "chain":
        from pymc_crf.inference.chain import ChainEngine

        return ChainEngine()
    if name == "brute_force":
        from pymc_crf.inference.brute_force import BruteForce

        return BruteForce()
    if name == "junction_tree":
        from pymc_crf.inference.junction_tree import JunctionTree

        return JunctionTree(max_treewidth=max_treewidth)
    if name in ("bp", "bethe"):
        from pymc_crf.inference.bp import BeliefPropagation

        return BeliefPropagation()
    if name == "mean_field":
        from pymc_crf.inference.mean_field import MeanField

        return MeanField()
    if name == "gibbs":
        from pymc_crf.inference.gibbs import Gibbs

        return Gibbs()
    if name == "tree_ep":
        from pymc_crf.inference.tree_ep import TreeEP

        return TreeEP()
    raise ValueError(f"unknown inference {name!r}; choose one of {ENGINE_NAMES} or pass an Engine")


def get_engine(inference: str | Engine, batch: GraphBatch,
               max_treewidth: int = DEFAULT_MAX_TREEWIDTH, warn: bool = True) -> Engine:
    """The engine for ``inference`` on ``batch``.

    ``"auto"`` takes the chain engine when every graph is a canonical chain, else the junction tree
    when every graph's treewidth is at most ``max_treewidth``, else loopy BP with its Bethe
    approximation of log Z (with an :class:`ApproximateInferenceWarning`). A named exact engine that
    cannot handle the batch raises a ValueError saying why.
    """
    if isinstance(inference, Engine):
        return inference
    if not isinstance(inference, str) or inference not in ENGINE_NAMES:
        raise ValueError(f"unknown inference {inference!r}; choose one of {ENGINE_NAMES} "
                         "or pass an Engine instance")
    if inference != "auto":
        engine = _make(inference, max_treewidth)
        if not engine.supports(batch):
            if inference == "chain":
                engine._check(batch, None, None)  # raises with the offending graph
            if inference == "junction_tree":
                from pymc_crf.graphs.junction_tree import treewidth

                tw = treewidth(batch, limit=max_treewidth)
                g = int(tw.argmax())
                raise ValueError(f"junction_tree: graph {g} has treewidth {int(tw[g])} above "
                                 f"max_treewidth={max_treewidth}; raise the limit or use "
                                 "inference='bp' (approximate)")
            raise ValueError(f"engine {inference!r} cannot handle this graph batch")
        if not engine.exact and warn:
            warnings.warn(f"inference={inference!r}: log Z is the Bethe approximation, so the "
                          "likelihood is approximate", ApproximateInferenceWarning, stacklevel=3)
        return engine
    if batch.is_chain:
        return _make("chain", max_treewidth)
    jt = _make("junction_tree", max_treewidth)
    if jt.supports(batch):
        return jt
    if warn:
        warnings.warn(f"inference='auto': some graphs have treewidth above {max_treewidth}; "
                      "falling back to loopy BP, so log Z is the Bethe approximation",
                      ApproximateInferenceWarning, stacklevel=3)
    return _make("bp", max_treewidth)
