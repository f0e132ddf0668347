"""Engine selection: ``inference="auto"`` picks chain, then junction tree, then loopy BP."""

from __future__ import annotations

import numpy as np

from pymc_crf.graphs.batch import GraphBatch, as_graph_batch
from pymc_crf.inference.base import ApproximateInferenceWarning, Engine, warn_at_caller
from pymc_crf.inference.bp import BeliefPropagation
from pymc_crf.inference.brute_force import BruteForce
from pymc_crf.inference.chain import ChainEngine
from pymc_crf.inference.gibbs import Gibbs
from pymc_crf.inference.junction_tree import JunctionTree
from pymc_crf.inference.mean_field import MeanField
from pymc_crf.inference.tree_ep import TreeEP
from pymc_crf.validation import flag, whole_number

__all__ = ["ENGINE_NAMES", "ApproximateInferenceWarning", "LOG_Z_ENGINE_NAMES", "get_engine",
           "require_log_z"]

# name -> engine class ("bethe" is loopy BP under the name of its log Z approximation)
_ENGINES: dict[str, type[Engine]] = {
    "chain": ChainEngine, "junction_tree": JunctionTree, "bp": BeliefPropagation,
    "bethe": BeliefPropagation, "tree_ep": TreeEP, "mean_field": MeanField, "gibbs": Gibbs,
    "brute_force": BruteForce}
ENGINE_NAMES = ("auto", *_ENGINES)
LOG_Z_ENGINE_NAMES = ("auto", *(n for n, cls in _ENGINES.items() if cls.has_log_z))
DEFAULT_MAX_TREEWIDTH = 10


def _make(name: str, max_treewidth: int) -> Engine:
    cls = _ENGINES[name]
    return cls(max_treewidth=max_treewidth) if cls is JunctionTree else cls()


def require_log_z(engine: Engine, inference: str | Engine) -> None:
    """Refuse an engine that gives no log Z where a likelihood needs one (e.g. Gibbs).

    Raises
    ------
    ValueError
        Naming the engine and the ones that can define a likelihood.
    """
    if not engine.has_log_z:
        raise ValueError(f"inference={inference!r} gives no estimate of log Z, so it cannot define "
                         f"a likelihood; use one of {LOG_Z_ENGINE_NAMES}")


def get_engine(inference: str | Engine, batch: GraphBatch,
               max_treewidth: int = DEFAULT_MAX_TREEWIDTH, warn: bool = True,
               need_log_z: bool = False) -> Engine:
    """The engine for ``inference`` on ``batch``.

    ``"auto"`` takes the chain engine when every graph is a canonical chain, else the junction tree
    when every graph's treewidth is at most ``max_treewidth``, else loopy BP with its Bethe
    approximation of log Z (with an :class:`ApproximateInferenceWarning`). A named engine that
    cannot handle the batch raises a ValueError saying why; a named approximate engine warns with
    the name of its approximation (Bethe, TreeEP, mean field), except BP and TreeEP on a batch
    of forests, where they are exact.

    Parameters
    ----------
    inference : str or Engine
        One of ``ENGINE_NAMES`` or an engine instance (used as it is).
    batch : GraphBatch
        The graphs the engine will run on.
    max_treewidth : int
        Limit for the junction tree (``"auto"`` falls back to BP above it).
    warn : bool
        Emit the :class:`ApproximateInferenceWarning`.
    need_log_z : bool
        The engine defines a likelihood (a ``CRF`` or the ``LogPartition`` Op): refuse engines
        without a log Z estimate (Gibbs) with a ValueError, before any model is evaluated.
    """
    warn, need_log_z = flag(warn, "warn"), flag(need_log_z, "need_log_z")
    batch = as_graph_batch(batch)
    # 1.9 would compare as a limit below 2 and send a treewidth-2 graph to loopy BP
    max_treewidth = whole_number(max_treewidth, "max_treewidth", minimum=0)
    if isinstance(inference, Engine):
        if need_log_z:
            require_log_z(inference, inference.name)
        inference.check_supported(batch)  # as for a named engine: refused here, not at first use
        return inference
    if not isinstance(inference, str) or inference not in ENGINE_NAMES:
        raise ValueError(f"unknown inference {inference!r}; choose one of {ENGINE_NAMES} "
                         "or pass an Engine instance")
    if inference != "auto":
        engine = _make(inference, max_treewidth)
        if need_log_z:
            require_log_z(engine, inference)
        engine.check_supported(batch)
        # BP and TreeEP are exact on forests (their fixed point is the tree's exact marginals),
        # so a forest-only batch gets no warning that its likelihood is approximate
        exact_here = isinstance(engine, BeliefPropagation | TreeEP) and batch.is_forest
        if not engine.exact and warn and engine.has_log_z and not exact_here:
            warn_at_caller(f"inference={inference!r}: log Z is {engine.approximation}, so the "
                           "likelihood is approximate", ApproximateInferenceWarning)
        return engine
    if batch.is_chain:
        return _make("chain", max_treewidth)
    jt = _make("junction_tree", max_treewidth)
    if jt.supports(batch):
        return jt
    bp = _make("bp", max_treewidth)
    if warn:
        # the width is that of a greedy triangulation, an upper bound on the treewidth (11 on an
        # 8 x 60 grid of treewidth 8), so the message names it and the way to exact inference
        tw = batch.treewidth(jt.heuristic, limit=max_treewidth)  # cached by supports()
        over = np.flatnonzero(tw > max_treewidth)
        g = int(over[0])
        width = f"{'' if batch.treewidth_is_exact(g, jt.heuristic) else 'at least '}{int(tw[g])}"
        warn_at_caller(f"inference='auto': the {jt.heuristic} triangulation of {over.size} of "
                       f"{batch.n_graphs} graphs has width above max_treewidth={max_treewidth} "
                       f"(graph {g}: {width}); falling back to loopy BP, so log Z is "
                       f"{bp.approximation} (a larger max_treewidth gives exact inference where "
                       "the clique tables fit in memory)",
                       ApproximateInferenceWarning)
    return bp
