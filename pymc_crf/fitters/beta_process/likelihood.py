"""The data term of the BP-HCRF bound and its gradients (Luo, Sun & Zhao, eqs. (14), (26), (30)-(33)).

With the mean-field factors fixed, every (class ``c``, sequence ``n``) pair is an ordinary chain CRF
over hidden states whose log-potentials are the *expected* log-potentials of Luo, Sun & Zhao, eq. (14)::

    node(n, c, t, k) = rho_nk * (sum_i f_nt(i) Wx[i, k] + Wy[k, c])
    edge(n, c, j, k) = We[j, k, c] * E[z_nj z_nk]            (transition j -> k)

with effective weights ``W = theta * E_q[log pi]`` (elementwise) and ``E[z_j z_k] = rho_j rho_k``
(``rho_k`` when ``j = k``). The data term is

    ell = sum_n log Z(y_n, n) - log sum_c Z(c, n)

(Luo, Sun & Zhao, eq. (30) with the geometric mean ``exp E log F`` in place of ``E F``: the form whose
gradients are the paper's eqs. (31)-(33); eq. (26) makes ``q(s | y_n)`` the clamped chain posterior, which is
optimal, so its entropy and expected potential add up to ``log Z(y_n, n)``). All ``C * G`` pairs go
through ONE compiled pass (:mod:`.pair_chains`: each pair's transition table is the same at every
edge, so no per-edge tables are formed), or through one call of a chain inference engine on the
replicated batch's tables (the general route, the reference in the tests).

The normaliser ``log sum_c Z(c, n)`` is taken at the expected potentials, not in expectation. The
potentials are linear in z and pi's logarithms and ``log Z`` is convex in them, so by Jensen's
inequality ``-log sum_c Z`` at the expected potentials is at least its expectation under q: the
data term is at least the exact mean-field one, and the fit's bound is the paper's objective, not a
guaranteed lower bound on ``log p(y | X)``.

Gradients with respect to the effective weights and to ``rho`` use the marginals weighted by
``[c = y_n] - p(c | n)`` (clamped minus free).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp
from scipy.special import log_softmax

from pymc_crf.distributions.hcrf import replicate_batch
from pymc_crf.fitters.beta_process.pair_chains import pair_chain_terms
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.potentials import hcrf_pair_tables

__all__ = ["HCRFData", "LikelihoodGrad", "data_term", "per_graph_subset"]


@dataclass
class HCRFData:
    """Sequences in the form the BP-HCRF fitter uses (features already sign-split).

    Besides the edge counts of the sequences it holds ``recent``, the last :data:`RECENT`
    evaluations of :func:`data_term` with their inputs, and, built on first use by an engine's
    evaluation, the replicated (class, sequence) batch and sparse 0/1 matrices that sum node rows
    per sequence and edge rows per (class, sequence) pair.
    """

    batch: GraphBatch
    X: np.ndarray          # (N, F)
    labels: np.ndarray     # (G,) or None for unlabelled sequences
    n_classes: int

    def __post_init__(self):
        self.edges_per_graph = np.diff(self.batch.edge_offsets)
        self.recent: list[tuple[tuple[np.ndarray, ...], LikelihoodGrad]] = []

    # what only an engine's evaluation uses, built on its first use
    @cached_property
    def rep(self) -> GraphBatch:
        return replicate_batch(self.batch, self.n_classes)

    @cached_property
    def node_sums(self) -> sp.csr_matrix:
        return _segment_matrix(self.batch.node_offsets)        # (G, N)

    @cached_property
    def pair_edge_sums(self) -> sp.csr_matrix:
        return _segment_matrix(self.rep.edge_offsets)          # (C * G, C * E)


#: evaluations :func:`data_term` keeps per data set. The coordinate steps of the fit ask for the
#: data term again where they or the step before evaluated it: the bound after a step at the
#: step's last trial point, the bound after the q(V, T, d) step (which leaves the data term
#: alone), the first gradient of a step at the point the previous step ended on (vi.py). The
#: data term is a deterministic function of its inputs, so a repeated point is looked up, not
#: recomputed.
RECENT = 4


def _segment_matrix(offsets: np.ndarray) -> sp.csr_matrix:
    """The 0/1 matrix whose row ``g`` sums rows ``offsets[g]:offsets[g+1]`` (empty rows give 0).

    One sparse product sums every segment in a single pass over the rows (a twentieth of the time
    of differences of cumulative sums for the (C * E, S * S) edge marginals of the Japanese vowels,
    and without their cancellation error)."""
    counts = np.diff(offsets)
    n = int(offsets[-1])
    return sp.csr_matrix((np.ones(n), (np.repeat(np.arange(counts.size), counts), np.arange(n))),
                         shape=(counts.size, n))


@dataclass
class LikelihoodGrad:
    """Value of ``ell`` and its gradients."""

    value: float
    per_graph: np.ndarray   # (G,) log p(y_n | X_n)
    log_probs: np.ndarray   # (G, C) log p(c | X_n)
    g_wx: np.ndarray        # (F, S)
    g_wy: np.ndarray        # (S, C)
    g_we: np.ndarray        # (S, S, C)
    g_rho: np.ndarray       # (G, S)


def pair_tables(data: HCRFData, wx, wy, we, rho):
    """Expected log-potential tables of the (class, sequence) pairs: (C*N, S), (C*E, S, S)."""
    b = data.batch
    S = wy.shape[0]
    U = data.X @ wx                                             # (N, S)
    ezz = rho[:, :, None] * rho[:, None, :]                     # (G, S, S)
    idx = np.arange(S)
    ezz[:, idx, idx] = rho
    node, edge = hcrf_pair_tables(data.X, wx, wy, we, b.n_edges, node_scale=rho[b.node_graph],
                                  graph_edge_scale=ezz, edges_per_graph=data.edges_per_graph)
    return node, edge, U, ezz


def data_term(data: HCRFData, engine, wx, wy, we, rho, want_grad: bool = True) -> LikelihoodGrad:
    """``ell`` and its gradients w.r.t. the effective weights and ``rho`` (without the gradients,
    their fields None, when not ``want_grad``); one of ``data.recent`` when its inputs are
    equal, with gradients if they are wanted.

    ``engine`` None (what the fitter and the predictor pass): the compiled pass over the
    homogeneous pair chains (:mod:`.pair_chains`), which forms no per-edge tables; else a chain
    inference engine run on the replicated batch's (C * N, S) and (C * E, S, S) tables (the
    general route, kept as the reference the compiled pass is tested against).
    """
    inputs = (wx, wy, we, rho)
    for seen, out in data.recent:
        if ((out.g_wx is not None or not want_grad)
                and all(np.array_equal(a, b) for a, b in zip(seen, inputs, strict=True))):
            return out
    out = _evaluate(data, engine, wx, wy, we, rho, want_grad)
    data.recent = [(tuple(np.array(a, copy=True) for a in inputs), out),
                   *data.recent[:RECENT - 1]]
    return out


def _evaluate(data: HCRFData, engine, wx, wy, we, rho, want_grad: bool) -> LikelihoodGrad:
    """:func:`data_term` computed: one pass of :func:`.pair_chains.pair_chain_terms` when
    ``engine`` is None, else one pass of ``engine`` over the replicated batch's tables."""
    if engine is None:
        return _evaluate_pairs(data, wx, wy, we, rho, want_grad)
    b, rep = data.batch, data.rep
    C, G, S = data.n_classes, b.n_graphs, wy.shape[0]
    node, edge, U, ezz = pair_tables(data, wx, wy, we, rho)
    if not want_grad:
        log_z = engine.log_partition(rep, node, edge).reshape(C, G).T
        lp = log_softmax(log_z, axis=1)
        per = lp[np.arange(G), data.labels] if data.labels is not None else np.zeros(G)
        return LikelihoodGrad(float(per.sum()), per, lp, None, None, None, None)
    m = engine.marginals(rep, node, edge)
    log_z = m.log_z.reshape(C, G).T
    lp = log_softmax(log_z, axis=1)
    per = lp[np.arange(G), data.labels]
    w = -np.exp(lp)                                             # (G, C): [c = y] - p(c | n)
    w[np.arange(G), data.labels] += 1.0
    dn = m.node.reshape(C, -1, S) * w.T[:, b.node_graph, None]  # (C, N, S)
    rho_n = rho[b.node_graph]
    A = dn.sum(axis=0)
    g_wx = data.X.T @ (A * rho_n)
    g_wy = np.einsum("cnk,nk->kc", dn, rho_n)
    node_val = A * U + np.einsum("cnk,kc->nk", dn, wy)
    g_rho = data.node_sums @ node_val                           # (G, S)
    if b.n_edges:
        # the weight [c = y] - p(c | n) is one number per pair: sum the pair's edges first
        de_g = ((data.pair_edge_sums @ m.edge.reshape(-1, S * S)).reshape(C, G, S, S)
                * w.T[:, :, None, None])                        # (C, G, S, S)
        g_we = np.einsum("cgij,gij->ijc", de_g, ezz)
        B = np.einsum("cgij,ijc->gij", de_g, we)                # (G, S, S)
        diag = np.einsum("gkk->gk", B)
        g_rho += (np.einsum("gkj,gj->gk", B, rho) + np.einsum("gik,gi->gk", B, rho)
                  - 2.0 * diag * rho + diag)
    else:
        g_we = np.zeros_like(we)
    return LikelihoodGrad(float(per.sum()), per, lp, g_wx, g_wy, g_we, g_rho)


#: the ``seqs`` argument of :func:`.pair_chains.pair_chain_terms` that selects every sequence
_ALL = np.zeros(0, np.int64)


def _pair_inputs(data: HCRFData, wx, wy, we, rho):
    """``U = X @ Wx`` and contiguous float64 ``Wy``, ``We``, ``rho`` for
    :func:`.pair_chains.pair_chain_terms`, refused unless finite (the kernel assumes finite
    potentials, as the chain engine's check of the tables does for NaN and +inf)."""
    U = np.ascontiguousarray(data.X @ wx)
    out = (U, *(np.ascontiguousarray(a, dtype=np.float64) for a in (wy, we, rho)))
    if not all(np.isfinite(a).all() for a in out):
        raise ValueError("BP-HCRF data term: the weights or rho are not finite (NaN or inf)")
    return out


def per_graph_subset(data: HCRFData, engine, wx, wy, we, rho, idx: np.ndarray) -> np.ndarray:
    """``log p(y_n | X_n)`` of the sequences ``idx`` alone (rows of ``rho`` outside ``idx`` are
    not read), equal to :func:`data_term`'s ``per_graph[idx]``: by the compiled pass over those
    sequences' pairs when ``engine`` is None, else the engine's whole-batch value indexed. Not
    kept in ``data.recent``."""
    idx = np.asarray(idx, dtype=np.int64)
    if engine is not None:
        return data_term(data, engine, wx, wy, we, rho, want_grad=False).per_graph[idx]
    if data.labels is None:
        return np.zeros(idx.size)
    log_z = pair_chain_terms(*_pair_inputs(data, wx, wy, we, rho),
                             data.batch.node_offsets.astype(np.int64), np.zeros(0, np.int64),
                             False, idx)[0][idx]
    return log_softmax(log_z, axis=1)[np.arange(idx.size), data.labels[idx]]


def _evaluate_pairs(data: HCRFData, wx, wy, we, rho, want_grad: bool) -> LikelihoodGrad:
    """:func:`data_term` by :func:`.pair_chains.pair_chain_terms` (one compiled pass)."""
    b = data.batch
    G = b.n_graphs
    labels = (np.ascontiguousarray(data.labels, dtype=np.int64) if data.labels is not None
              else np.zeros(G, np.int64))
    log_z, A, g_wy, g_we, g_rho = pair_chain_terms(
        *_pair_inputs(data, wx, wy, we, rho), b.node_offsets.astype(np.int64), labels,
        want_grad, _ALL)
    lp = log_softmax(log_z, axis=1)
    per = lp[np.arange(G), data.labels] if data.labels is not None else np.zeros(G)
    if not want_grad:
        return LikelihoodGrad(float(per.sum()), per, lp, None, None, None, None)
    g_wx = data.X.T @ (A * rho[b.node_graph])
    return LikelihoodGrad(float(per.sum()), per, lp, g_wx, g_wy, g_we, g_rho)
