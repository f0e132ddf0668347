"""Exact inference on graphs of small treewidth by junction-tree (clique-tree) calibration.

Each distinct graph shape is triangulated once (:mod:`pymc_crf.graphs.junction_tree`) and compiled,
for a given label count ``K``, into flat index arrays:

* clique tables: clique ``c`` owns entries ``tab_off[c]:tab_off[c+1]`` of one flat log-table, a
  ``K ** |C|`` mixed-radix table over the clique's variables (first variable most significant);
* factors: every node and edge potential is added into one "home" clique through an index array
  mapping each clique entry to the factor's table entry (``a`` or ``a * K + b``); the same arrays
  read node and edge marginals back out of the calibrated clique beliefs;
* separators: a non-root clique lists its separator variables first, so the entries sharing a
  separator value ``s`` are the contiguous block ``s * R : (s + 1) * R``; ``pmap`` maps each entry
  of the parent clique to the child's separator value.

The kernels then run over all graphs of a shape at once, in log space (log-sum-exp with a per-value
max), with no Python loop over nodes or cliques: an upward (collect) pass gives log Z, a downward
(distribute) pass in Hugin form calibrates every clique so that each belief is
``log p(x_C) + log Z`` (Qi 2005, eq. (3.2): the joint is the product of clique marginals over separator
marginals). Max-product
with backtracking gives the MAP labelling; forward sampling down the upward beliefs gives exact
samples; forward-mode tangents of the same passes give exact Hessian-vector products of log Z.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.graphs.junction_tree import HEURISTICS, JunctionTreeStructure
from pymc_crf.inference.base import (
    Engine,
    MapResult,
    Marginals,
    check_direction,
    check_potentials,
    checked_draws,
    checked_map,
    engine_doc,
)
from pymc_crf.kernel_cache import njit
from pymc_crf.validation import generator, whole_number

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

__all__ = ["JunctionTree"]

_NEG_INF = -np.inf


class _Compiled(NamedTuple):
    """Flat index arrays of one junction tree for one label count (see the module docstring)."""

    tab_off: np.ndarray     # (m+1,) clique table offsets
    parent: np.ndarray      # (m,) parent clique, -1 for roots; parents precede children
    blk: np.ndarray         # (m,) block size R = K ** (|C| - |S|) (the whole table for a root)
    msg_off: np.ndarray     # (m+1,) offsets of the K ** |S| upward messages (1 entry for a root)
    pmap_off: np.ndarray    # (m+1,) offsets into pmap (parent table size for non-roots, else 0)
    pmap: np.ndarray        # parent entry -> separator value of the child
    cl_fac_off: np.ndarray  # (m+1,) factors of clique c: cl_fac_off[c]:cl_fac_off[c+1]
    fac_off: np.ndarray     # (F+1,) offsets into fac_idx (each of length K ** |C| of its clique)
    fac_idx: np.ndarray     # clique entry -> factor table entry
    fac_perm: np.ndarray    # clique entries sorted by factor table entry (equal-size groups)
    fac_kind: np.ndarray    # (F,) 0 node, 1 edge
    fac_id: np.ndarray      # (F,) local node / edge id
    croot: np.ndarray       # (m,) root clique of each clique's component
    roots: np.ndarray       # root cliques
    sep_len: np.ndarray     # (m,) |S| (0 for roots)
    cvar_off: np.ndarray    # (m+1,) offsets into cvars
    cvars: np.ndarray       # clique variables (local ids) in table order
    max_tab: int            # largest clique table
    max_msg: int            # largest separator table


def _compile(jt: JunctionTreeStructure, edges_local: np.ndarray, K: int) -> _Compiled:
    """Flatten a junction tree into the index arrays the kernels use (once per shape and K)."""
    m = jt.n_cliques
    sizes = np.array([len(c) for c in jt.cliques], dtype=np.int64)
    sep_len = np.array([len(s) for s in jt.separators], dtype=np.int64)
    tab = K ** sizes
    tab_off = np.concatenate([[0], np.cumsum(tab)]).astype(np.int64)
    blk = K ** (sizes - sep_len)
    msg_off = np.concatenate([[0], np.cumsum(K ** sep_len)]).astype(np.int64)
    parent = np.asarray(jt.parent, dtype=np.int64)

    def digit(c: int, pos: int) -> np.ndarray:
        # Digit of variable at position `pos` for every entry of clique c's table.
        return (np.arange(tab[c], dtype=np.int64) // K ** (sizes[c] - 1 - pos)) % K

    pmaps = []
    for c in range(m):
        p = int(parent[c])
        if p < 0:
            pmaps.append(np.zeros(0, np.int64))
            continue
        s = np.zeros(tab[p], np.int64)
        for var in jt.separators[c]:
            s = s * K + digit(p, jt.cliques[p].index(var))
        pmaps.append(s)
    pmap_off = np.concatenate([[0], np.cumsum([len(x) for x in pmaps])]).astype(np.int64)

    # Factors grouped by home clique (nodes then edges within a clique).
    per_clique: list[list[tuple[int, int]]] = [[] for _ in range(m)]
    for i, c in enumerate(jt.node_clique):
        per_clique[c].append((0, i))
    for e, c in enumerate(jt.edge_clique):
        per_clique[c].append((1, e))
    idx_parts, kind, fid, cl_fac_off = [], [], [], [0]
    for c in range(m):
        cq = jt.cliques[c]
        for k, i in per_clique[c]:
            if k == 0:
                idx_parts.append(digit(c, cq.index(i)))
            else:
                u, v = (int(x) for x in edges_local[i])
                idx_parts.append(digit(c, cq.index(u)) * K + digit(c, cq.index(v)))
            kind.append(k)
            fid.append(i)
        cl_fac_off.append(len(kind))
    fac_off = np.concatenate([[0], np.cumsum([len(x) for x in idx_parts])]).astype(np.int64)
    croot = np.empty(m, np.int64)
    for c in range(m):
        croot[c] = c if parent[c] < 0 else croot[parent[c]]
    cvars = np.array([v for cq in jt.cliques for v in cq], dtype=np.int64)
    return _Compiled(
        tab_off=tab_off, parent=parent, blk=blk.astype(np.int64), msg_off=msg_off,
        pmap_off=pmap_off,
        pmap=np.concatenate(pmaps).astype(np.int32) if m else np.zeros(0, np.int32),
        cl_fac_off=np.asarray(cl_fac_off, np.int64), fac_off=fac_off,
        fac_idx=np.concatenate(idx_parts).astype(np.int32) if idx_parts else np.zeros(0, np.int32),
        fac_perm=(np.concatenate([np.argsort(x, kind="stable") for x in idx_parts]).astype(np.int32)
                  if idx_parts else np.zeros(0, np.int32)),
        fac_kind=np.asarray(kind, np.int64), fac_id=np.asarray(fid, np.int64), croot=croot,
        roots=np.flatnonzero(parent < 0).astype(np.int64), sep_len=sep_len,
        cvar_off=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), cvars=cvars,
        max_tab=int(tab.max()), max_msg=int((K ** sep_len).max()))


# ============================================================================ numba kernels
# Every kernel takes the arrays of one _Compiled (unpacked) plus, for the graphs of one shape, their
# first global node id `n0s` and first global edge id `e0s`. Edge tables come flattened to (E, K*K);
# with a shared table (E == 1) every edge reads row 0.

@njit(cache=True)
def _assemble(b, n0, e0, node, edge2, tab_off, cl_fac_off, fac_off, fac_idx, fac_kind, fac_id):
    """Clique log-potentials: sum of the node / edge log-tables assigned to each clique."""
    shared = edge2.shape[0] == 1
    b[:] = 0.0
    for c in range(tab_off.shape[0] - 1):
        lo = tab_off[c]
        for f in range(cl_fac_off[c], cl_fac_off[c + 1]):
            f0, f1 = fac_off[f], fac_off[f + 1]
            if fac_kind[f] == 0:
                row = node[n0 + fac_id[f]]
            else:
                row = edge2[0 if shared else e0 + fac_id[f]]
            for j in range(f1 - f0):
                b[lo + j] += row[fac_idx[f0 + j]]


@njit(cache=True)
def _upward(b, msg, cond, tab_off, blk, msg_off, parent, pmap_off, pmap, use_max, store,
            db=None, dmsg=None):
    """Collect pass (children before parents).

    msg[c, s] = logsumexp (max with ``use_max``) of clique c's block s, added into the parent
    through pmap; a root's single message is its component's log Z. With ``store``, ``cond`` gets
    the conditional exp(b - msg[c, s]) = p(x_{C \\ S} | x_S = s, evidence below C) of every entry,
    which the distribute pass and the sampler reuse, so each entry costs one exp in all. The largest
    entry of a block is skipped (its weight is 1). Given the tangents ``db`` of the entries (with
    ``store``), the same pass carries the forward-mode derivative into ``dmsg``, the tangent of a
    logsumexp being the conditional-weighted sum of the tangents; without them numba compiles
    the pass without that branch."""
    m = parent.shape[0]
    for c in range(m - 1, -1, -1):
        lo, R = tab_off[c], blk[c]
        mo = msg_off[c]
        for s in range(msg_off[c + 1] - mo):
            base = lo + s * R
            mx = _NEG_INF
            imax = 0
            for r in range(R):
                if b[base + r] > mx:
                    mx = b[base + r]
                    imax = r
            if use_max or mx == _NEG_INF:
                msg[mo + s] = mx
                if store:
                    for r in range(R):
                        cond[base + r] = 0.0
                if db is not None:
                    dmsg[mo + s] = 0.0
                continue
            rest = 0.0
            if store:
                for r in range(R):
                    w = 1.0 if r == imax else np.exp(b[base + r] - mx)
                    cond[base + r] = w
                    rest += w
                rest -= 1.0
                inv = 1.0 / (1.0 + rest)
                for r in range(R):
                    cond[base + r] *= inv
                if db is not None:
                    acc = 0.0
                    for r in range(R):
                        acc += cond[base + r] * db[base + r]
                    dmsg[mo + s] = acc
            else:
                for r in range(R):
                    if r != imax:
                        rest += np.exp(b[base + r] - mx)
            msg[mo + s] = mx + np.log(1.0 + rest)
        _send_to_parent(b, msg, c, mo, parent, tab_off, pmap_off, pmap)
        if db is not None:
            _send_to_parent(db, dmsg, c, mo, parent, tab_off, pmap_off, pmap)


@njit(cache=True, inline="always")
def _send_to_parent(tables, msg, c, mo, parent, tab_off, pmap_off, pmap):
    """Multiply clique ``c``'s message (log space: add) into its parent's table, entry by entry
    through the parent map."""
    p = parent[c]
    if p >= 0:
        plo = tab_off[p]
        q0 = pmap_off[c]
        for j in range(pmap_off[c + 1] - q0):
            tables[plo + j] += msg[mo + pmap[q0 + j]]


@njit(cache=True)
def _downward(cond, pr, db, dmsg, ssum, sdot, tab_off, blk, msg_off, parent, pmap_off, pmap,
              tangent):
    """Distribute pass (parents before children), Hugin form, on probabilities: no exp at all.

    Fills ``pr`` with the calibrated clique marginals p(x_C): a root's conditional is its marginal;
    a child block s gets p(x_{C \\ S} | x_S = s) * p(x_S = s), with p(x_S = s) summed from the
    parent's marginal (Qi 2005, eq. (3.2)). Separator values whose probability underflows to 0 give 0,
    their value to double precision. With ``tangent``, ``db`` (the collect-pass tangents) is turned
    into the tangents of the calibrated log-beliefs: d log p(x_S = s) - d msg[c, s] is added to
    block s."""
    m = parent.shape[0]
    for c in range(m):
        lo, R = tab_off[c], blk[c]
        mo = msg_off[c]
        nS = msg_off[c + 1] - mo
        p = parent[c]
        if p < 0:
            for j in range(R):
                pr[lo + j] = cond[lo + j]
            continue
        plo = tab_off[p]
        q0, q1 = pmap_off[c], pmap_off[c + 1]
        for s in range(nS):
            ssum[s] = 0.0
            sdot[s] = 0.0
        for j in range(q1 - q0):
            ssum[pmap[q0 + j]] += pr[plo + j]
        if tangent:
            for j in range(q1 - q0):
                sdot[pmap[q0 + j]] += pr[plo + j] * db[plo + j]
        for s in range(nS):
            base = lo + s * R
            ps = ssum[s]
            for r in range(R):
                pr[base + r] = cond[base + r] * ps
            if tangent and ps > 0.0:
                dd = sdot[s] / ps - dmsg[mo + s]
                for r in range(R):
                    db[base + r] += dd


@njit(cache=True)
def _log_z_of(msg, msg_off, roots):
    lz = 0.0
    for r in roots:
        lz += msg[msg_off[r]]
    return lz


@njit(cache=True)
def _log_partition_kernel(n0s, e0s, node, edge2, tab_off, parent, blk, msg_off, pmap_off, pmap,
                          cl_fac_off, fac_off, fac_idx, fac_kind, fac_id, roots):
    out = np.empty(n0s.shape[0])
    b = np.empty(tab_off[-1])
    msg = np.empty(msg_off[-1])
    for g in range(n0s.shape[0]):
        _assemble(b, n0s[g], e0s[g], node, edge2, tab_off, cl_fac_off, fac_off, fac_idx,
                  fac_kind, fac_id)
        _upward(b, msg, b, tab_off, blk, msg_off, parent, pmap_off, pmap, False, False)
        out[g] = _log_z_of(msg, msg_off, roots)
    return out


@njit(cache=True)
def _scatter_marginals(pr, n0, e0, nm, em2, K, tab_off, cl_fac_off, fac_off, fac_perm, fac_kind,
                       fac_id):
    """Sum each clique's entries into the node / edge tables of the factors it is home to.

    ``fac_perm`` lists the clique entries grouped by factor table entry (groups of equal size), so
    each table entry is one register sum (no scatter into a tiny table)."""
    shared = em2.shape[0] == 1
    for c in range(tab_off.shape[0] - 1):
        lo, n = tab_off[c], tab_off[c + 1] - tab_off[c]
        for f in range(cl_fac_off[c], cl_fac_off[c + 1]):
            f0 = fac_off[f]
            if fac_kind[f] == 0:
                row = nm[n0 + fac_id[f]]
                nk = K
            else:
                row = em2[0 if shared else e0 + fac_id[f]]
                nk = K * K
            gsz = n // nk
            for a in range(nk):
                acc = 0.0
                q = f0 + a * gsz
                for t in range(gsz):
                    acc += pr[lo + fac_perm[q + t]]
                row[a] += acc


@njit(cache=True)
def _marginals_kernel(n0s, e0s, node, edge2, nm, em2, K, tab_off, parent, blk, msg_off, pmap_off,
                      pmap, cl_fac_off, fac_off, fac_idx, fac_perm, fac_kind, fac_id, roots,
                      max_msg):
    """log Z per graph; node / edge marginals accumulated into nm (N, K) and em2 (E or 1, K*K)."""
    out = np.empty(n0s.shape[0])
    b = np.empty(tab_off[-1])
    cond = np.empty(tab_off[-1])
    pr = np.empty(tab_off[-1])
    msg = np.empty(msg_off[-1])
    ssum = np.empty(max_msg)
    for g in range(n0s.shape[0]):
        n0, e0 = n0s[g], e0s[g]
        _assemble(b, n0, e0, node, edge2, tab_off, cl_fac_off, fac_off, fac_idx, fac_kind, fac_id)
        _upward(b, msg, cond, tab_off, blk, msg_off, parent, pmap_off, pmap, False, True)
        out[g] = _log_z_of(msg, msg_off, roots)
        _downward(cond, pr, b, msg, ssum, ssum, tab_off, blk, msg_off, parent, pmap_off, pmap,
                  False)
        _scatter_marginals(pr, n0, e0, nm, em2, K, tab_off, cl_fac_off, fac_off, fac_perm,
                           fac_kind, fac_id)
    return out


@njit(cache=True)
def _cvp_kernel(n0s, e0s, node, edge2, vnode, vedge2, cn, ce2, K, tab_off, parent, blk, msg_off,
                pmap_off, pmap, cl_fac_off, fac_off, fac_idx, fac_perm, fac_kind, fac_id, croot,
                max_msg):
    """Hessian of log Z applied to (vnode, vedge): the tangent of the marginals along v.

    With p the calibrated clique marginals and db the tangents of the calibrated log-beliefs,
    d mu = sum_j p_j (db_j - d log Z) over the entries of the factor's home clique."""
    b = np.empty(tab_off[-1])
    db = np.empty(tab_off[-1])
    cond = np.empty(tab_off[-1])
    pr = np.empty(tab_off[-1])
    msg = np.empty(msg_off[-1])
    dmsg = np.empty(msg_off[-1])
    ssum = np.empty(max_msg)
    sdot = np.empty(max_msg)
    for g in range(n0s.shape[0]):
        n0, e0 = n0s[g], e0s[g]
        _assemble(b, n0, e0, node, edge2, tab_off, cl_fac_off, fac_off, fac_idx, fac_kind, fac_id)
        _assemble(db, n0, e0, vnode, vedge2, tab_off, cl_fac_off, fac_off, fac_idx, fac_kind,
                  fac_id)
        _upward(b, msg, cond, tab_off, blk, msg_off, parent, pmap_off, pmap, False, True, db,
                dmsg)
        _downward(cond, pr, db, dmsg, ssum, sdot, tab_off, blk, msg_off, parent, pmap_off, pmap,
                  True)
        for c in range(parent.shape[0]):
            lo, hi = tab_off[c], tab_off[c + 1]
            dlz = dmsg[msg_off[croot[c]]]
            for j in range(lo, hi):
                pr[j] *= db[j] - dlz
        _scatter_marginals(pr, n0, e0, cn, ce2, K, tab_off, cl_fac_off, fac_off, fac_perm,
                           fac_kind, fac_id)


@njit(cache=True)
def _map_kernel(n0s, node, edge2, e0s, labels, K, tab_off, parent, blk, msg_off, pmap_off, pmap,
                cl_fac_off, fac_off, fac_idx, fac_kind, fac_id, roots, sep_len, cvar_off, cvars):
    """Max-product collect pass, then backtracking from the roots: each clique takes the best
    entry of its block given the separator labels its parent already fixed."""
    out = np.empty(n0s.shape[0])
    b = np.empty(tab_off[-1])
    msg = np.empty(msg_off[-1])
    for g in range(n0s.shape[0]):
        n0, e0 = n0s[g], e0s[g]
        _assemble(b, n0, e0, node, edge2, tab_off, cl_fac_off, fac_off, fac_idx, fac_kind, fac_id)
        _upward(b, msg, b, tab_off, blk, msg_off, parent, pmap_off, pmap, True, False)
        out[g] = _log_z_of(msg, msg_off, roots)
        for c in range(parent.shape[0]):
            v0, v1 = cvar_off[c], cvar_off[c + 1]
            s = 0
            for k in range(sep_len[c]):
                s = s * K + labels[n0 + cvars[v0 + k]]
            base = tab_off[c] + s * blk[c]
            best, rbest = _NEG_INF, 0
            for r in range(blk[c]):
                if b[base + r] > best:
                    best, rbest = b[base + r], r
            for k in range(v1 - 1, v0 + sep_len[c] - 1, -1):
                labels[n0 + cvars[k]] = rbest % K
                rbest //= K
    return out


@njit(cache=True)
def _sample_kernel(n0s, e0s, node, edge2, out, rng, K, tab_off, parent, blk, msg_off, pmap_off,
                   pmap, cl_fac_off, fac_off, fac_idx, fac_kind, fac_id, sep_len, cvar_off, cvars):
    """Exact forward sampling: p(x_{C \\ S} | x_S) is clique C's collect-pass conditional (it holds
    C's potentials and everything below C), so sampling the roots from their marginals and each
    child block given its parent's draw gives exact joint samples."""
    b = np.empty(tab_off[-1])
    cdf = np.empty(tab_off[-1])
    msg = np.empty(msg_off[-1])
    m = parent.shape[0]
    for g in range(n0s.shape[0]):
        n0, e0 = n0s[g], e0s[g]
        _assemble(b, n0, e0, node, edge2, tab_off, cl_fac_off, fac_off, fac_idx, fac_kind, fac_id)
        _upward(b, msg, cdf, tab_off, blk, msg_off, parent, pmap_off, pmap, False, True)
        for c in range(m):  # conditionals -> cumulative distributions, block by block
            lo, R = tab_off[c], blk[c]
            for s in range(msg_off[c + 1] - msg_off[c]):
                base = lo + s * R
                for r in range(1, R):
                    cdf[base + r] += cdf[base + r - 1]
        for t in range(out.shape[0]):
            for c in range(m):
                v0, v1 = cvar_off[c], cvar_off[c + 1]
                s = 0
                for k in range(sep_len[c]):
                    s = s * K + out[t, n0 + cvars[v0 + k]]
                R = blk[c]
                base = tab_off[c] + s * R
                u = rng.random() * cdf[base + R - 1]
                lo_, hi_ = 0, R - 1  # first r with cdf[r] > u
                while lo_ < hi_:
                    mid = (lo_ + hi_) // 2
                    if cdf[base + mid] > u:
                        hi_ = mid
                    else:
                        lo_ = mid + 1
                r = lo_
                for k in range(v1 - 1, v0 + sep_len[c] - 1, -1):
                    out[t, n0 + cvars[k]] = r % K
                    r //= K


# ============================================================================ engine
class JunctionTree(Engine):
    """Exact inference by junction-tree calibration, for graphs of treewidth <= ``max_treewidth``.

    Parameters
    ----------
    max_treewidth : int, default 10
        Largest treewidth (of the heuristic triangulation) accepted; a clique table has
        ``K ** (treewidth + 1)`` entries. Graphs above it raise a ValueError.
    heuristic : {"min_fill", "min_weight"}
        Greedy elimination heuristic of the triangulation.
    max_table_entries : int, default 2**24
        Refuse shapes whose clique tables together exceed this many entries (memory guard: the
        kernels hold a few float64 buffers of that size plus int32 index maps).
    """

    name = "junction_tree"
    exact = True

    def __init__(self, max_treewidth: int = 10, heuristic: str = "min_fill",
                 max_table_entries: int = 2 ** 24):
        if heuristic not in HEURISTICS:
            raise ValueError(f"unknown triangulation heuristic {heuristic!r}; use one of "
                             f"{HEURISTICS}")
        self.max_treewidth = whole_number(max_treewidth, "max_treewidth", minimum=0)
        self.heuristic = heuristic
        self.max_table_entries = whole_number(max_table_entries, "max_table_entries")

    def __repr__(self) -> str:
        return f"JunctionTree(max_treewidth={self.max_treewidth}, heuristic={self.heuristic!r})"

    def supports(self, batch: GraphBatch) -> bool:
        tw = batch.treewidth(self.heuristic, limit=self.max_treewidth)
        return bool((tw <= self.max_treewidth).all())

    # ---------------------------------------------------------------- setup
    def _groups(self, batch: GraphBatch, K: int):
        """(compiled arrays, graph ids, first node ids, first edge ids) per distinct shape.

        The list is cached on the batch, so repeated evaluations (e.g. every log-density call of
        a sampler) skip the Python loop over shapes."""
        return batch.cached(
            ("junction_tree_engine", "groups", self.heuristic, K, self.max_treewidth,
             self.max_table_entries),
            lambda: self._compile_groups(batch, K))

    def _compile_groups(self, batch: GraphBatch, K: int):
        self.check_supported(batch)
        out = []
        for key, gs in batch.structure_groups.items():
            comp = batch.cached(("junction_tree_engine", "compiled", self.heuristic, key, K),
                                lambda gs=gs: self._compile_shape(batch, int(gs[0]), K))
            out.append((comp, gs, batch.node_offsets[gs], batch.edge_offsets[gs]))
        return out

    def _table_entries(self, batch: GraphBatch, g: int, K: int) -> int:
        """Clique-table entries of graph ``g``'s junction tree with ``K`` labels."""
        return sum(K ** len(c) for c in batch.junction_tree(g, self.heuristic).cliques)

    def _compile_shape(self, batch: GraphBatch, g: int, K: int) -> _Compiled:
        jt = batch.junction_tree(g, self.heuristic)
        total = self._table_entries(batch, g, K)
        if total > self.max_table_entries:
            raise ValueError(
                f"junction_tree: graph {g} needs {total} clique-table entries "
                f"(treewidth {jt.treewidth}, K={K}), above max_table_entries="
                f"{self.max_table_entries}")
        return _compile(jt, batch.local_edges(g), K)

    @engine_doc
    def fits(self, batch: GraphBatch, n_labels: int, total_entries: float | None = None) -> bool:
        """Whether the engine runs on ``batch`` with ``n_labels`` labels: every treewidth within
        the limit and every graph's clique tables within ``max_table_entries`` (and, with
        ``total_entries``, the tables of all distinct graph shapes together within it).

        Parameters
        ----------
        %(batch)s
        %(n_labels)s
        total_entries : float, optional
            A bound on the clique-table entries of all distinct graph shapes together.

        Returns
        -------
        bool
            True when :meth:`fitting_graphs` takes every graph (and every treewidth is within
            the limit).
        """
        # the treewidths alone settle it when one is over the limit (no junction trees to build)
        return self.supports(batch) and bool(self.fitting_graphs(batch, n_labels,
                                                                 total_entries).all())

    @engine_doc
    def fitting_graphs(self, batch: GraphBatch, n_labels: int,
                       total_entries: float | None = None) -> np.ndarray:
        """Boolean mask (G,) of the graphs the engine takes: treewidth within the limit and
        clique tables within ``max_table_entries``; with ``total_entries``, only as many graph
        shapes as fit in it together, smallest tables first (so the mask is all True exactly when
        :meth:`fits`).

        Parameters
        ----------
        %(batch)s
        %(n_labels)s
        total_entries : float, optional
            A bound on the clique-table entries of the taken graph shapes together.

        Returns
        -------
        ndarray (G,) bool
            True for the graphs the engine takes (all graphs of a shape alike).
        """
        tw = batch.treewidth(self.heuristic, limit=self.max_treewidth)
        mask = np.zeros(batch.n_graphs, bool)
        shapes = []
        for gs in batch.structure_groups.values():
            if tw[gs[0]] <= self.max_treewidth:  # table sizes only where the tree is cheap
                size = self._table_entries(batch, int(gs[0]), n_labels)
                if size <= self.max_table_entries:
                    shapes.append((size, gs))
        used = 0
        for size, gs in sorted(shapes, key=lambda s: s[0]):
            if total_entries is not None and used + size > total_entries:
                break
            used += size
            mask[gs] = True
        return mask

    def check_supported(self, batch: GraphBatch) -> None:
        """Raise a ValueError naming the first graph whose treewidth exceeds the limit.

        See :meth:`Engine.check_supported` for the parameters.
        """
        tw = batch.treewidth(self.heuristic, limit=self.max_treewidth)
        over = np.flatnonzero(tw > self.max_treewidth)
        if over.size:
            g = int(over[0])
            # Big graphs stop eliminating at the limit, so their width may be a lower bound.
            exact = batch.treewidth_is_exact(g, self.heuristic)
            raise ValueError(
                f"junction_tree: graph {g} has treewidth {'' if exact else 'at least '}"
                f"{int(tw[g])} (of its {self.heuristic} triangulation), above max_treewidth="
                f"{self.max_treewidth} ({over.size} graph(s) over the limit); raise "
                "max_treewidth or use an approximate engine ('bp', 'tree_ep')")

    # ---------------------------------------------------------------- interface
    def log_partition(self, batch: GraphBatch, node_logpot: ArrayLike,
                      edge_logpot: ArrayLike) -> np.ndarray:
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        K = node.shape[1]
        edge2 = edge.reshape(edge.shape[0], K * K)
        log_z = np.empty(batch.n_graphs)
        for c, gs, n0s, e0s in self._groups(batch, K):
            log_z[gs] = _log_partition_kernel(
                n0s, e0s, node, edge2, c.tab_off, c.parent, c.blk, c.msg_off, c.pmap_off, c.pmap,
                c.cl_fac_off, c.fac_off, c.fac_idx, c.fac_kind, c.fac_id, c.roots)
        return log_z

    def marginals(self, batch: GraphBatch, node_logpot: ArrayLike,
                  edge_logpot: ArrayLike) -> Marginals:
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        K = node.shape[1]
        edge2 = edge.reshape(edge.shape[0], K * K)
        nm = np.zeros_like(node)
        em = np.zeros_like(edge)
        em2 = em.reshape(edge.shape[0], K * K)
        log_z = np.empty(batch.n_graphs)
        for c, gs, n0s, e0s in self._groups(batch, K):
            log_z[gs] = _marginals_kernel(
                n0s, e0s, node, edge2, nm, em2, K, c.tab_off, c.parent, c.blk, c.msg_off,
                c.pmap_off, c.pmap, c.cl_fac_off, c.fac_off, c.fac_idx, c.fac_perm, c.fac_kind,
                c.fac_id, c.roots, c.max_msg)
        return Marginals(log_z, nm, em)

    def map_assignment(self, batch: GraphBatch, node_logpot: ArrayLike,
                       edge_logpot: ArrayLike) -> MapResult:
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        K = node.shape[1]
        edge2 = edge.reshape(edge.shape[0], K * K)
        labels = np.zeros(batch.n_total_nodes, np.int64)
        score = np.empty(batch.n_graphs)
        for c, gs, n0s, e0s in self._groups(batch, K):
            score[gs] = _map_kernel(
                n0s, node, edge2, e0s, labels, K, c.tab_off, c.parent, c.blk, c.msg_off,
                c.pmap_off, c.pmap, c.cl_fac_off, c.fac_off, c.fac_idx, c.fac_kind, c.fac_id,
                c.roots, c.sep_len, c.cvar_off, c.cvars)
        return checked_map(MapResult(labels, score))

    def sample(self, batch: GraphBatch, node_logpot: ArrayLike, edge_logpot: ArrayLike,
               n_samples: int, rng: np.random.Generator | int | None = None) -> np.ndarray:
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        n_samples = whole_number(n_samples, "n_samples", minimum=0)
        rng = generator(rng, "rng")
        K = node.shape[1]
        edge2 = edge.reshape(edge.shape[0], K * K)
        out = np.zeros((int(n_samples), batch.n_total_nodes), np.int64)
        for c, _gs, n0s, e0s in self._groups(batch, K):
            # numba draws from the caller's Generator itself: same seed, same samples.
            _sample_kernel(n0s, e0s, node, edge2, out, rng, K, c.tab_off, c.parent, c.blk,
                           c.msg_off, c.pmap_off, c.pmap, c.cl_fac_off, c.fac_off, c.fac_idx,
                           c.fac_kind, c.fac_id, c.sep_len, c.cvar_off, c.cvars)
        return checked_draws(batch, node, edge, out)

    def covariance_vector_product(self, batch: GraphBatch, node_logpot: ArrayLike,
                                  edge_logpot: ArrayLike, v_node: ArrayLike,
                                  v_edge: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        node, edge = check_potentials(batch, node_logpot, edge_logpot)
        K = node.shape[1]
        v_node, v_edge = check_direction(node, edge, v_node, v_edge)
        edge2 = edge.reshape(edge.shape[0], K * K)
        vedge2 = v_edge.reshape(edge.shape[0], K * K)
        cn = np.zeros_like(node)
        ce = np.zeros_like(edge)
        ce2 = ce.reshape(edge.shape[0], K * K)
        for c, _gs, n0s, e0s in self._groups(batch, K):
            _cvp_kernel(n0s, e0s, node, edge2, v_node, vedge2, cn, ce2, K, c.tab_off, c.parent,
                        c.blk, c.msg_off, c.pmap_off, c.pmap, c.cl_fac_off, c.fac_off, c.fac_idx,
                        c.fac_perm, c.fac_kind, c.fac_id, c.croot, c.max_msg)
        return cn, ce
