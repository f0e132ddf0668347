"""``ChainEngine``: the exact engine for batches of canonical chains."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from pymc_crf.feature_products import is_sparse
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import (
    Engine,
    MapResult,
    Marginals,
    check_feature_tables,
    check_potentials,
    checked_draws,
    checked_map,
)
from pymc_crf.inference.chain.dispatch import (
    _forward_backward_features_from_numba,
    _forward_backward_features_graphs_from_numba,
    _forward_backward_from_numba,
    _forward_backward_graphs_from_numba,
    forward_backward,
    forward_backward_features,
    small_batch,
)
from pymc_crf.inference.chain.log_space import _covariance_vector_product
from pymc_crf.inference.chain.sampling import _ffbs, _log_forward_messages, _viterbi
from pymc_crf.kernel_cache import njit
from pymc_crf.validation import generator, whole_number

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import ArrayLike
    from scipy.sparse import sparray, spmatrix

__all__ = ["ChainEngine"]


_NO_WEIGHTS = np.zeros(0)


@njit(cache=True)
def _check_tables(node, edge, n_nodes, n_edges):
    """``check_potentials`` inside compiled models: the shapes of the tables against the batch
    (a wrong row count would read or write outside them) and no NaN or +inf entry."""
    K = node.shape[1]
    if node.shape[0] != n_nodes:
        raise ValueError("log Z: node log-potentials must have one row per node of the batch "
                         "(N, K); check the features' rows and the number of labels/classes")
    if K < 1:
        raise ValueError("log Z: need at least one label (K >= 1)")
    if (edge.shape[1] != K or edge.shape[2] != K
            or (edge.shape[0] != n_edges and edge.shape[0] != 1)):
        raise ValueError("log Z: edge log-potentials must have shape (E, K, K), or (1, K, K) "
                         "for a shared table, with the node tables' K")
    for table in (node.reshape(-1), edge.reshape(-1)):
        for i in range(table.size):
            if not table[i] < np.inf:  # NaN or +inf (-inf entries are forbidden labels)
                raise ValueError("log Z: log-potentials contain NaN or +inf")


def _closure_kernels(batch: GraphBatch, n_labels: int | None, per_graph, lanes, inputs):
    """The njit closures ``(log_z(*tables), vjp(*tables, g))`` of ``ChainEngine.numba_kernels``
    (tables ``(node, edge)``) and ``feature_numba_kernels`` (``(node, x, w)``), over copies of
    the batch's offsets. ``inputs`` (njit) checks the tables against the batch and returns them
    C-contiguous (the kernels' one layout); the kernel is ``per_graph`` for a batch that
    ``small_batch`` runs graph by graph, else ``lanes``. None for a batch that is not all chains."""
    if not batch.is_chain:
        return None
    fb = per_graph if small_batch(batch.n_total_nodes, n_labels) else lanes
    # The offsets are read-only constants to numba, as the batch's own arrays are on the
    # engine's Python paths; the graph weights are writeable on every path (a captured empty
    # array would be a read-only constant), so both closures and the engine share each kernel's
    # one compiled version.
    no, eo, n_graphs = batch.node_offsets.copy(), batch.edge_offsets.copy(), batch.n_graphs

    @njit
    def log_z(*tables):
        return fb(*inputs(*tables), no, eo, False, np.zeros(0))[0]

    @njit
    def vjp(*tables_and_g):
        tables = inputs(*tables_and_g[:-1])
        g = np.ascontiguousarray(tables_and_g[-1])
        _check_output_gradient(g, n_graphs)
        return fb(*tables, no, eo, True, g)

    return log_z, vjp


@njit(cache=True)
def _check_output_gradient(g, n_graphs):
    if g.shape[0] != n_graphs:
        raise ValueError("log Z gradient: the output gradient must have one entry per graph")


class ChainEngine(Engine):
    """Exact forward-backward engine for batches of canonical chains.

    Examples
    --------
    >>> import numpy as np
    >>> from pymc_crf import GraphBatch
    >>> from pymc_crf.inference import ChainEngine
    >>> batch = GraphBatch.chains([4, 2])
    >>> node = np.zeros((6, 3)); edge = np.zeros((1, 3, 3))
    >>> np.allclose(ChainEngine().log_partition(batch, node, edge), [4 * np.log(3), 2 * np.log(3)])
    True
    """

    name = "chain"
    exact = True

    def supports(self, batch: GraphBatch) -> bool:
        return batch.is_chain

    def check_supported(self, batch: GraphBatch) -> None:
        """Raise a ValueError naming the first graph that is not a canonical chain.

        See :meth:`Engine.check_supported` for the parameters.
        """
        if not batch.is_chain:
            bad = int(np.flatnonzero(batch.kinds != "chain")[0])
            raise ValueError(f"chain engine: graph {bad} ({batch.kinds[bad]}) is not a canonical "
                             "chain (edges (0,1), (1,2), ... in order; GraphBatch.chains builds "
                             "them); use 'junction_tree' or 'auto'")

    def _check(self, batch, node_logpot, edge_logpot):
        self.check_supported(batch)
        return check_potentials(batch, node_logpot, edge_logpot)

    def log_partition(self, batch: GraphBatch, node_logpot: ArrayLike,
                      edge_logpot: ArrayLike) -> np.ndarray:
        node, edge = self._check(batch, node_logpot, edge_logpot)
        return forward_backward(node, edge, batch.node_offsets, batch.edge_offsets, False,
                                 _NO_WEIGHTS)[0]

    def marginals(self, batch: GraphBatch, node_logpot: ArrayLike,
                  edge_logpot: ArrayLike) -> Marginals:
        node, edge = self._check(batch, node_logpot, edge_logpot)
        return Marginals(*forward_backward(node, edge, batch.node_offsets, batch.edge_offsets,
                                            True, _NO_WEIGHTS))

    def map_assignment(self, batch: GraphBatch, node_logpot: ArrayLike,
                       edge_logpot: ArrayLike) -> MapResult:
        node, edge = self._check(batch, node_logpot, edge_logpot)
        return checked_map(MapResult(*_viterbi(node, edge, batch.node_offsets,
                                                batch.edge_offsets)))

    def sample(self, batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike,
               n_samples: int, rng: np.random.Generator | int | None = None) -> np.ndarray:
        node, edge = self._check(batch, node_logpot, edge_logpot)
        la = _log_forward_messages(node, edge, batch.node_offsets, batch.edge_offsets)
        n_samples = whole_number(n_samples, "n_samples", minimum=0)
        u = generator(rng, "rng").random((n_samples, batch.n_total_nodes))
        return checked_draws(batch, node, edge,
                             _ffbs(la, edge, batch.node_offsets, batch.edge_offsets, u))

    def covariance_vector_product(self, batch: GraphBatch, node_logpot: ArrayLike,
                                  edge_logpot: ArrayLike, v_node: ArrayLike,
                                  v_edge: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        node, edge = self._check(batch, node_logpot, edge_logpot)
        vn = np.ascontiguousarray(v_node, dtype=np.float64)
        ve = np.ascontiguousarray(v_edge, dtype=np.float64)
        if vn.shape != node.shape or ve.shape != edge.shape:
            raise ValueError(f"direction shapes {vn.shape}, {ve.shape} do not match the tables "
                             f"{node.shape}, {edge.shape}")
        return _covariance_vector_product(node, edge, batch.node_offsets, batch.edge_offsets, vn,
                                          ve)

    def numba_kernels(self, batch: GraphBatch,
                      n_labels: int | None = None) -> tuple[Callable, Callable] | None:
        """Njit closures ``(log_z(node, edge), vjp(node, edge, g))`` over this batch's offsets;
        ``vjp`` returns log Z and the marginals weighted by ``g`` from one pass. With a known
        ``n_labels`` that makes the batch small (``small_batch``), they run graph by graph and
        never compile the lane-block kernels.

        Used by the PyTensor Ops' numba implementation; the closures hand the tables to the kernels
        through object mode (``chain.dispatch``), so no compiled model links the kernels in.

        See :meth:`Engine.numba_kernels` for the parameters.
        """
        n_nodes, n_edges = batch.n_total_nodes, batch.n_edges

        @njit
        def inputs(node, edge):
            c_node, c_edge = np.ascontiguousarray(node), np.ascontiguousarray(edge)
            _check_tables(c_node, c_edge, n_nodes, n_edges)
            return c_node, c_edge

        return _closure_kernels(batch, n_labels, _forward_backward_graphs_from_numba,
                                _forward_backward_from_numba, inputs)

    def feature_numba_kernels(self, batch: GraphBatch,
                              n_labels: int | None = None) -> tuple[Callable, Callable] | None:
        """Njit closures ``(log_z(node, x, w), vjp(node, x, w, g))`` of
        :meth:`log_z_and_feature_marginals` over this batch's offsets (``w`` (Fe, K^2)), for the
        edge-feature Ops' numba implementation (graph by graph for a small batch, as
        :meth:`numba_kernels`).

        See :meth:`Engine.feature_numba_kernels` for the parameters.
        """
        n_nodes, n_edges = batch.n_total_nodes, batch.n_edges

        @njit
        def inputs(node, x, w):
            c_node, c_x, c_w = (np.ascontiguousarray(node), np.ascontiguousarray(x),
                                np.ascontiguousarray(w))
            K = c_node.shape[1]
            _check_tables(c_node, np.zeros((1, K, K)), n_nodes, n_edges)
            if c_x.shape[0] != n_edges or c_w.shape[0] != c_x.shape[1]:
                raise ValueError("log Z: edge features must be (E, Fe) with one row per edge "
                                 "of the batch, and edge weights (Fe, K^2)")
            if c_w.shape[1] != K * K:
                raise ValueError("log Z: edge weights must be (Fe, K^2) with the node tables' K")
            for v in (c_x.reshape(-1), c_w.reshape(-1)):
                for i in range(v.size):
                    if not np.abs(v[i]) < np.inf:
                        raise ValueError("log Z: edge features or weights contain NaN or inf")
            return c_node, c_x, c_w

        return _closure_kernels(batch, n_labels, _forward_backward_features_graphs_from_numba,
                                _forward_backward_features_from_numba, inputs)

    def log_z_and_feature_marginals(self, batch: GraphBatch, node_logpot: ArrayLike,
                                    edge_features: np.ndarray | spmatrix | sparray,
                                    edge_weights: ArrayLike, graph_weights: ArrayLike | None = None
                                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``Engine.log_z_and_feature_marginals`` without the (E, K, K) tables: for dense edge
        features the lane kernel forms each block's tables from the features and adds the
        expected edge features up as it goes (sparse ones take the generic version)."""
        if is_sparse(edge_features):
            return super().log_z_and_feature_marginals(batch, node_logpot, edge_features,
                                                       edge_weights, graph_weights)
        K = np.shape(node_logpot)[-1]
        log_z, gn, gW = self._feature_pass(batch, node_logpot, edge_features, edge_weights,
                                           graph_weights, True)
        return log_z, gn, gW.reshape(-1, K, K)

    def feature_log_partition(self, batch: GraphBatch, node_logpot: ArrayLike,
                              edge_features: np.ndarray | spmatrix | sparray,
                              edge_weights: ArrayLike) -> np.ndarray:
        """``Engine.feature_log_partition`` by the lane kernel's forward pass alone (sparse
        features take the generic version)."""
        if is_sparse(edge_features):
            return super().feature_log_partition(batch, node_logpot, edge_features, edge_weights)
        return self._feature_pass(batch, node_logpot, edge_features, edge_weights, None,
                                  False)[0]

    def _feature_pass(self, batch, node_logpot, edge_features, edge_weights, graph_weights,
                      want_marginals):
        """The checked inputs through ``_forward_backward_features_lanes``."""
        self.check_supported(batch)
        node, Xe, We, gw = check_feature_tables(batch, node_logpot, edge_features, edge_weights,
                                                graph_weights)
        Xe = np.ascontiguousarray(Xe, dtype=np.float64)
        return forward_backward_features(node, Xe, We, batch.node_offsets, batch.edge_offsets,
                                          want_marginals, gw)

    def log_z_and_weighted_marginals(self, batch: GraphBatch, node_logpot: ArrayLike,
                                     edge_logpot: ArrayLike,
                                     graph_weights: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """log Z and the marginals of graph g times ``graph_weights[g]`` (the VJP of log Z),
        one pass.

        See :meth:`Engine.log_z_and_weighted_marginals` for the parameters.
        """
        node, edge = self._check(batch, node_logpot, edge_logpot)
        gw = np.ascontiguousarray(graph_weights, dtype=np.float64)
        return forward_backward(node, edge, batch.node_offsets, batch.edge_offsets, True, gw)
