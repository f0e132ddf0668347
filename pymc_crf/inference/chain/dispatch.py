"""Which kernel runs a batch: numpy (``small``), graph by graph (``per_graph``), lane blocks
(``blocks``) in one thread or in parts on the worker threads (``parts``).

The tier is chosen by the batch's work (positions x K^2), so a small model never compiles the
lane-block kernels (docs/benchmarks.md, "Cold start"). The same choice serves tables given whole
and log-linear tables given as edge features and weights.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import numpy as np
from numba import objmode

from pymc_crf.compile_notice import first_use_notice
from pymc_crf.inference.chain.features import _OVERFLOW, _forward_backward_features_graphs
from pymc_crf.inference.chain.parts import (
    _forward_backward_features_lanes,
    _forward_backward_lanes,
)
from pymc_crf.inference.chain.per_graph import _forward_backward_graphs
from pymc_crf.inference.chain.small import (
    SMALL_LENGTH,
    SMALL_WORK,
    forward_backward_small,
    is_small,
)
from pymc_crf.inference.kernels import writeable
from pymc_crf.kernel_cache import njit

# Batches with less forward-backward work than this (positions x K^2) run graph by graph
# (``_forward_backward_graphs``): they never compile the lane-block kernels, whose compilation
# is most of a machine's first fit of a small model (docs/benchmarks.md, "Cold start"), while on
# such batches the lanes save little a pass. The smallest
# batches run in numpy, compiling nothing (``small``).
_LANE_WORK = 1 << 18


def small_batch(n_nodes: int, n_labels: int | None) -> bool:
    """Whether a batch of ``n_nodes`` positions and ``n_labels`` labels runs graph by graph
    (False when the number of labels is not known)."""
    return n_labels is not None and n_nodes * n_labels * n_labels < _LANE_WORK


#: the tiers, cheapest first
TIERS = ("small", "graphs", "lanes")
_PINNED: contextvars.ContextVar[str | None] = contextvars.ContextVar("chain_tier", default=None)


def batch_tier(n_nodes: int, longest: int, n_labels: int) -> str:
    """The tier a batch of one or more chains, ``n_nodes`` positions in all and at most
    ``longest`` in one, runs in (as ``is_small`` and ``small_batch`` choose)."""
    if n_nodes * n_labels * n_labels < SMALL_WORK and longest <= SMALL_LENGTH:
        return "small"
    return "graphs" if small_batch(n_nodes, n_labels) else "lanes"


@contextlib.contextmanager
def pinned_tier(tier: str | None) -> Iterator[None]:
    """Run every chain batch of this context (thread or task) in ``tier`` (None: by its size).

    Each tier sums in its own order, so a graph's marginals can differ in the last bits between
    tiers; a part of a corpus run in the corpus's tier gives exactly the corpus's numbers
    (``pmc.distributed.predict``). ``"small"`` is taken only where the batch qualifies."""
    if tier is not None and tier not in TIERS:
        raise ValueError(f"tier must be one of {TIERS} or None; got {tier!r}")
    token = _PINNED.set(tier)
    try:
        yield
    finally:
        _PINNED.reset(token)


def _tier(node_off, K: int) -> str:
    pinned = _PINNED.get()
    if pinned == "small" and not is_small(node_off, K):
        pinned = "graphs"
    if pinned is not None:
        return pinned
    if is_small(node_off, K):
        return "small"
    return "graphs" if small_batch(int(node_off[-1]), K) else "lanes"


def forward_backward(node, edge, node_off, edge_off, want_marginals, gw):
    """Forward-backward of a batch in its tier: a large batch in lane blocks, in parts on the
    worker threads (``parts``), a small batch graph by graph, the smallest in numpy."""
    # writeable: compiled models reach here through object mode with their arrays as PyTensor
    # holds them, read-only constants included
    node, edge, gw = writeable(node), writeable(edge), writeable(gw)
    tier = _tier(node_off, node.shape[1])
    if tier == "small":
        return forward_backward_small(node, edge, node_off, edge_off, want_marginals, gw)
    if tier == "graphs":
        return _forward_backward_graphs(node, edge, node_off, edge_off, want_marginals, gw)
    return _forward_backward_lanes(node, edge, node_off, edge_off, want_marginals, gw)


def forward_backward_features(node, Xe, We, node_off, edge_off, want_marginals, gw):
    """``forward_backward`` of log-linear edge tables given as edge features ``Xe`` and weights
    ``We``: the tables are formed block by block in the lane tier, chain by chain below it."""
    node, Xe, We, gw = writeable(node), writeable(Xe), writeable(We), writeable(gw)
    K = node.shape[1]
    tier = _tier(node_off, K)
    if tier == "small":
        E = Xe.shape[0]
        edge = (Xe @ We).reshape(E, K, K) if E else np.zeros((0, K, K))
        if not np.isfinite(edge).all():  # as every kernel path refuses them (-inf included)
            raise ValueError(_OVERFLOW)
        log_z, node_m, edge_m = forward_backward_small(node, edge, node_off, edge_off,
                                                       want_marginals, gw)
        gW = (Xe.T @ edge_m.reshape(E, K * K) if want_marginals and E
              else np.zeros((We.shape[0], K * K)))
        return log_z, node_m, np.ascontiguousarray(gW)
    if tier == "graphs":
        first_use_notice(_forward_backward_features_graphs, "the chain engine's kernels")
        return _forward_backward_features_graphs(node, Xe, We, node_off, edge_off, want_marginals,
                                                 gw)
    return _forward_backward_features_lanes(node, Xe, We, node_off, edge_off, want_marginals, gw)


# Compiled PyTensor functions reach the kernels through object mode: the lane tier through the
# Python drivers above, the per-graph tier through its kernel (below). Called directly, a kernel
# is linked into every compiled function and optimised again as part of it: about 8 s of
# compilation for each new model of the per-graph tier and 10 s for each of the lane tier,
# against a hand-off of about 7 microseconds a call. The kernels called from here are compiled
# with ``nogil=True``, so the chains of a sampler that runs them in threads (nutpie) do not
# wait for each other while a kernel runs.
@njit(cache=True)
def _forward_backward_from_numba(node, edge, node_off, edge_off, want_marginals, gw):
    """``forward_backward`` from compiled code."""
    with objmode(lz="float64[::1]", nm="float64[:, ::1]", em="float64[:, :, ::1]"):
        lz, nm, em = forward_backward(node, edge, node_off, edge_off, want_marginals, gw)
    return lz, nm, em


@njit(cache=True)
def _forward_backward_features_from_numba(node, Xe, We, node_off, edge_off, want_marginals, gw):
    """``forward_backward_features`` from compiled code."""
    with objmode(lz="float64[::1]", nm="float64[:, ::1]", gW="float64[:, ::1]"):
        lz, nm, gW = forward_backward_features(node, Xe, We, node_off, edge_off,
                                               want_marginals, gw)
    return lz, nm, gW


@njit(cache=True)
def _forward_backward_graphs_from_numba(node, edge, node_off, edge_off, want_marginals, gw):
    """``_forward_backward_graphs`` from compiled code, through object mode."""
    with objmode(lz="float64[::1]", nm="float64[:, ::1]", em="float64[:, :, ::1]"):
        lz, nm, em = _forward_backward_graphs(writeable(node), writeable(edge), node_off,
                                              edge_off, want_marginals, writeable(gw))
    return lz, nm, em


@njit(cache=True)
def _forward_backward_features_graphs_from_numba(node, Xe, We, node_off, edge_off,
                                                 want_marginals, gw):
    """``_forward_backward_features_graphs`` from compiled code, through object mode."""
    with objmode(lz="float64[::1]", nm="float64[:, ::1]", gW="float64[:, ::1]"):
        lz, nm, gW = _forward_backward_features_graphs(
            writeable(node), writeable(Xe), writeable(We), node_off, edge_off, want_marginals,
            writeable(gw))
    return lz, nm, gW
