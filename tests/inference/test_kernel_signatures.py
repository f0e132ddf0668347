"""Each kernel compiles once, whatever the caller passes.

numba compiles a kernel once per signature, and a read-only array (a constant, a
``np.broadcast_to`` view, an array PyTensor holds) is another signature than a writeable one: a
second compilation of the chain's lane kernels costs about a minute on a new machine. The
engines' entry points and the compiled models' kernels hand the kernels writeable float arrays
only, so no kernel here ends up with a read-only float signature.
"""

import numpy as np
from numba import types

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference import JunctionTree
from pymc_crf.inference.chain import ChainEngine, per_graph, sampling
from pymc_crf.inference.junction_tree import _log_partition_kernel, _marginals_kernel
from pymc_crf.inference.kernels import writeable


def _read_only(a) -> np.ndarray:
    a = np.array(a, dtype=np.float64)
    a.flags.writeable = False
    return a


def _read_only_float_signatures(kernel) -> list:
    """The kernel's compiled signatures with a read-only float64 array among the arguments."""
    return [sig for sig in kernel.signatures
            if any(isinstance(t, types.Array) and t.dtype == types.float64 and not t.mutable
                   for t in sig)]


def test_writeable_passes_writeable_arrays_and_copies_read_only_ones():
    a = np.arange(3.0)
    assert writeable(a) is a
    r = _read_only(a)
    w = writeable(r)
    assert w is not r and w.flags.writeable
    np.testing.assert_array_equal(w, a)


def test_compiled_model_kernels_compile_one_graph_weight_signature():
    """The log Z closure (no graph weights) and the VJP closure (weights from PyTensor, here
    read-only) call the per-graph kernel with the same signature."""
    batch = GraphBatch.chains([4, 1, 3, 5])
    log_z, vjp = ChainEngine().numba_kernels(batch, 3)
    rng = np.random.default_rng(0)
    node, edge = rng.normal(size=(batch.n_total_nodes, 3)), rng.normal(size=(1, 3, 3))
    lz = log_z(node, edge)
    lz2, _, _ = vjp(_read_only(node), _read_only(edge), _read_only(np.ones(batch.n_graphs)))
    np.testing.assert_allclose(lz2, lz, rtol=1e-12)
    assert _read_only_float_signatures(per_graph._fb_scaled_graphs) == []


def test_engine_entry_points_hand_kernels_writeable_tables():
    rng = np.random.default_rng(1)
    chains = GraphBatch.chains([5, 7])
    node, edge = _read_only(rng.normal(size=(12, 3))), _read_only(rng.normal(size=(1, 3, 3)))
    engine = ChainEngine()
    engine.sample(chains, node, edge, 3, rng)
    engine.log_z_and_weighted_marginals(chains, node, edge, _read_only(np.ones(2)))
    for kernel in (sampling._ffbs, sampling._log_forward_messages,
                   per_graph._fb_scaled_graphs):
        assert _read_only_float_signatures(kernel) == [], kernel.py_func.__name__
    grid = GraphBatch.grid(2, 3)
    # a broadcast view: read-only, as a shared table spread over every edge often is
    full = np.broadcast_to(rng.normal(size=(1, 2, 2)), (grid.n_edges, 2, 2))
    jt = JunctionTree()
    node = _read_only(rng.normal(size=(grid.n_total_nodes, 2)))
    np.testing.assert_allclose(jt.log_partition(grid, node, full),
                               jt.marginals(grid, node, full).log_z, rtol=1e-12)
    for kernel in (_log_partition_kernel, _marginals_kernel):
        assert _read_only_float_signatures(kernel) == [], kernel.py_func.__name__
