"""``pymc-crf warm-up``: compile every numba kernel of the inference engines once, ahead of use.

numba keeps compiled kernels in its disk cache, so this is needed once per machine (and again
after an upgrade of pymc_crf or numba); without it each kernel compiles on its first use, which
for the larger ones takes from seconds to about a minute. Each engine is run on a small problem
that takes every path of its kernels (the chain engine's per-graph and lane-block kernels, table
and edge-feature forms, Viterbi, sampling and covariance products; junction tree; BP, TreeEP and
mean field), and one small CRF model's log-density and gradient are compiled by PyTensor.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import TextIO

import numpy as np

__all__ = ["warm_up"]


def _chain_problem(lengths, K, rng, shared):
    from pymc_crf.graphs.batch import GraphBatch

    batch = GraphBatch.chains(lengths)
    node = rng.normal(size=(batch.n_total_nodes, K))
    edge = rng.normal(size=(1 if shared else batch.n_edges, K, K))
    return batch, node, edge


def _chain(rng) -> None:
    from pymc_crf.inference.chain import ChainEngine

    eng = ChainEngine()
    # a long chain (per-graph kernel) and a large batch (lane blocks), shared and per-edge tables
    for lengths, K in (([100, 70], 3), ([60] * 600, 8)):
        for shared in (True, False):
            batch, node, edge = _chain_problem(lengths, K, rng, shared)
            eng.marginals(batch, node, edge)
            eng.log_partition(batch, node, edge)
            eng.log_z_and_weighted_marginals(batch, node, edge, np.ones(batch.n_graphs))
        Xe = rng.random((batch.n_edges, 3))
        We = rng.normal(size=(3, K, K))
        eng.log_z_and_feature_marginals(batch, node, Xe, We)
        eng.feature_log_partition(batch, node, Xe, We)
    # scores whose range fails the scaled recursions' exactness test: the lanes' log-space redo
    for shared in (True, False):
        batch, node, edge = _chain_problem([60] * 600, 8, rng, shared)
        eng.log_z_and_weighted_marginals(batch, 300 * node, 300 * edge, np.ones(batch.n_graphs))
    batch, node, edge = _chain_problem([5, 7], 3, rng, False)
    eng.map_assignment(batch, node, edge)
    eng.sample(batch, node, edge, 2, rng)
    eng.covariance_vector_product(batch, node, edge, np.ones_like(node), np.ones_like(edge))


def _loopy(rng) -> None:
    from pymc_crf.graphs.batch import GraphBatch
    from pymc_crf.inference import BeliefPropagation, JunctionTree, MeanField, TreeEP

    batch = GraphBatch.grid(3, 3, n_graphs=2)
    K = 2
    node = rng.normal(size=(batch.n_total_nodes, K))
    edge = rng.normal(size=(batch.n_edges, K, K))
    for eng in (JunctionTree(), BeliefPropagation(), TreeEP(), MeanField()):
        eng.marginals(batch, node, edge)
    jt = JunctionTree()
    jt.map_assignment(batch, node, edge)
    jt.sample(batch, node, edge, 2, rng)


def _model(rng) -> None:
    import pymc as pm

    import pymc_crf as pmc

    train, _ = pmc.datasets.bcrf_synthetic("chain", n_train=4, n_test=1, seed=0)
    with pm.Model(coords=train.coords) as model:
        w = pm.Normal("w", 0.0, 1.0, dims=("edge_feature", "label_i", "label_j"))
        pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features, edge_weights=w,
                potential=train.potential, epsilon=train.epsilon,
                observed=train.padded_labels, dims=("graph", "position"))
    model.compile_logp()(model.initial_point())
    model.compile_dlogp()(model.initial_point())


STEPS: dict[str, Callable[[np.random.Generator], None]] = {
    "chain engine kernels": _chain,
    "junction tree, BP, TreeEP and mean-field kernels": _loopy,
    "a small CRF model (PyTensor)": _model,
}


def warm_up(out: TextIO | None = None) -> dict[str, float]:
    """Compile (or load from numba's disk cache) every engine kernel, announcing each step.

    Returns
    -------
    dict
        Seconds per step.
    """
    from pymc_crf.compile_notice import logger

    out = sys.stdout if out is None else out
    rng = np.random.default_rng(0)
    times = {}
    # the kernels' first-use notices ("compiling ...; `pymc-crf warm-up` compiles every kernel
    # ahead of time") would tell the user to run what is running, on standard error in the
    # middle of a step's line: the steps' own lines say what compiles
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        for what, step in STEPS.items():
            print(f"warm-up: {what} ...", end="", file=out, flush=True)
            t0 = time.perf_counter()
            step(rng)
            times[what] = time.perf_counter() - t0
            print(f" {times[what]:.1f} s", file=out, flush=True)
    finally:
        logger.setLevel(level)
    return times
