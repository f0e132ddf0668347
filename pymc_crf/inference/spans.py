"""Chunk (span) probabilities of chain CRFs by constrained forward-backward.

A chunk scheme (:class:`ChunkScheme`) reads the K labels as tags ``"O"``, ``"B-X"``, ``"I-X"``
(BIO) or also ``"E-X"``, ``"S-X"`` (BIOES). Chunks follow one rule for both schemes: tag ``j``
*continues* the chunk of the previous tag ``i`` when ``j`` is ``I-X`` (BIOES: ``I-X`` or
``E-X``) and ``i`` is ``B-X`` or ``I-X`` of the same type ``X``; a chunk is a maximal run of
non-O tags each continuing the one before. For BIO these are the chunks of the CoNLL-2000
``conlleval`` script (Tjong Kim Sang & Buchholz 2000), as :func:`pymc_crf.metrics.bio_chunks`
reads them; for BIOES the same lenient reading (an ``E-X`` or ``I-X`` after ``O`` opens a chunk,
a chunk may end on ``I-X``).

:func:`span_log_probabilities` gives, for spans ``(graph, start, end, type)``, the log-probability
under the CRF of

* ``match="chunk"``: the span is one of the labelling's chunks: the tag at ``start`` has type
  ``X`` and does not continue the tag before it, every tag up to ``end`` continues the one
  before, and the tag after ``end`` does not continue it; the event a chunk-level F1 scores as
  correct;
* ``match="tags"``: the tags from ``start`` to ``end`` are exactly the given ones and the tag after
  ``end`` does not continue them: the constrained forward-backward confidence of Culotta &
  McCallum 2004 (sec. 3), which clamps the field's own tags.

Both are ratios ``Z_constrained / Z``: the forward messages up to the window before the span and
the backward messages after it are the unconstrained ones, and only the window (the span and one
position each side) is recomputed with its node and pair constraints, in log space (one numba
kernel, one compiled signature), so the cost is ``O(K^2)`` per window position plus one log-space
forward-backward pass per batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.base import check_potentials
from pymc_crf.inference.kernels import SUM, copy_into, log_backward, log_forward, logsumexp_1d, unused_arrays
from pymc_crf.kernel_cache import njit

__all__ = ["ChunkScheme", "Spans", "chain_log_messages", "check_chain_batch",
           "span_log_probabilities"]

_PREFIXES = {"BIO": ("B", "I"), "BIOES": ("B", "I", "E", "S")}


def check_chain_batch(batch: GraphBatch, what: str) -> None:
    """Raise a ValueError naming the first graph of ``batch`` that is not a canonical chain:
    ``what`` (span probabilities, k-best lists) is implemented for chain CRFs only."""
    if not batch.is_chain:
        bad = int(np.flatnonzero(batch.kinds != "chain")[0])
        raise ValueError(f"{what} are implemented for chain CRFs; graph {bad} is a "
                         f"{batch.kinds[bad]} graph (every graph must be a canonical chain, as "
                         "GraphBatch.chains builds them)")


class ChunkScheme:
    """Tags of the K labels read as BIO or BIOES chunk tags (module docstring).

    Parameters
    ----------
    tags : sequence of str
        The tag of each label, ``tags[k]`` for label ``k``: ``"O"`` or ``"PREFIX-TYPE"``.
    scheme : {"BIO", "BIOES"}

    Attributes
    ----------
    types : list of str
        The chunk types, in order of first appearance in ``tags``.
    label_type : ndarray (K,) int
        Index into ``types`` of each label's type, -1 for ``"O"``.
    continues : ndarray (K, K) bool
        ``continues[i, j]``: tag ``j`` right after tag ``i`` continues ``i``'s chunk.
    """

    def __init__(self, tags: Sequence[str], scheme: str = "BIO"):
        if scheme not in _PREFIXES:
            raise ValueError(f"scheme must be 'BIO' or 'BIOES'; got {scheme!r}")
        if isinstance(tags, str) or len(tags) < 2:
            raise ValueError("tags must be a sequence of at least two tag names, one per label "
                             f"(e.g. ['O', 'B-NP', 'I-NP']); got {tags!r}")
        self.tags = [str(t) for t in tags]
        self.scheme = scheme
        if len(set(self.tags)) != len(self.tags):
            raise ValueError(f"tags must be distinct; got {self.tags}")
        prefixes, types = [], []
        for t in self.tags:
            if t == "O":
                prefixes.append("O")
                types.append("")
                continue
            prefix, _, kind = t.partition("-")
            if prefix not in _PREFIXES[scheme] or not kind:
                allowed = ", ".join(f"{p}-TYPE" for p in _PREFIXES[scheme])
                raise ValueError(f"tags: {t!r} is not a {scheme} tag (O, {allowed})")
            prefixes.append(prefix)
            types.append(kind)
        self.prefix = np.array(prefixes)
        self.types = list(dict.fromkeys(k for k in types if k))
        self.label_type = np.array([self.types.index(k) if k else -1 for k in types], np.int64)
        same = ((self.label_type[:, None] == self.label_type[None, :])
                & (self.label_type[:, None] >= 0))
        opens = np.isin(self.prefix, ("B", "I"))
        inner = np.isin(self.prefix, ("I", "E") if scheme == "BIOES" else ("I",))
        self.continues = same & opens[:, None] & inner[None, :]

    @property
    def n_labels(self) -> int:
        return len(self.tags)

    def chunks(self, labels: np.ndarray) -> list[tuple[int, int, int]]:
        """Chunks ``(type index, first, last)`` (inclusive positions) of one label sequence."""
        labels = np.asarray(labels, dtype=np.int64)
        out, start = [], None
        for t, y in enumerate(labels):
            if start is not None and not self.continues[labels[t - 1], y]:
                out.append((int(self.label_type[labels[start]]), start, t - 1))
                start = None
            if start is None and self.label_type[y] >= 0:
                start = t
        if start is not None:
            out.append((int(self.label_type[labels[start]]), start, len(labels) - 1))
        return out


@dataclass(frozen=True)
class Spans:
    """Spans of a batch: ``graph``, ``start`` and ``end`` (inclusive positions within the graph)
    and ``type`` (index into the scheme's ``types``), each (S,)."""

    graph: np.ndarray
    start: np.ndarray
    end: np.ndarray
    type: np.ndarray

    def __len__(self) -> int:
        return int(self.graph.size)

    @classmethod
    def of_labelling(cls, batch: GraphBatch, labels: np.ndarray, scheme: ChunkScheme) -> Spans:
        """The chunks of a labelling (N,) of ``batch``, graph after graph."""
        labels = batch.check_labels(labels, scheme.n_labels)
        rows = []
        for g in range(batch.n_graphs):
            lo, hi = int(batch.node_offsets[g]), int(batch.node_offsets[g + 1])
            rows += [(g, s, e, k) for k, s, e in scheme.chunks(labels[lo:hi])]
        a = np.array(rows, np.int64).reshape(-1, 4)
        return cls(a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy(), a[:, 3].copy())

    def check(self, batch: GraphBatch, scheme: ChunkScheme) -> None:
        """Raise a ValueError naming the first span outside its graph or of an unknown type."""
        g, s, e, k = (np.asarray(a) for a in (self.graph, self.start, self.end, self.type))
        if not (g.shape == s.shape == e.shape == k.shape and g.ndim == 1):
            raise ValueError("spans: graph, start, end and type must be 1-d arrays of one length")
        bad = (g < 0) | (g >= batch.n_graphs)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"spans: span {i} is in graph {g[i]}; the batch has "
                             f"{batch.n_graphs} graphs")
        bad = (k < 0) | (k >= len(scheme.types))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"spans: span {i} has type index {k[i]}; the scheme has the "
                             f"{len(scheme.types)} types {scheme.types}")
        n = batch.n_nodes[g]
        bad = (s < 0) | (e < s) | (e >= n)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"spans: span {i} ({scheme.types[k[i]]!r} in graph {g[i]}, positions "
                             f"{s[i]}..{e[i]}) is not a range of positions inside its graph of "
                             f"{n[i]} nodes")


@njit(cache=True)
def _messages_kernel(node, edge, node_off, edge_off):
    """Log forward (N, K) and backward (N, K) messages and log Z (G,) of every chain (the
    shared log-space recursions of ``kernels``, sum-product)."""
    N, K = node.shape
    G = node_off.shape[0] - 1
    shared = edge.shape[0] == 1
    alpha = np.empty((N, K))
    beta = np.empty((N, K))
    log_z = np.empty(G)
    noi, no2, no3 = unused_arrays()
    for g in range(G):
        lo = node_off[g]
        n = node_off[g + 1] - lo
        la = np.empty((n, K))
        lb = np.zeros((n, K))
        for j in range(K):
            la[0, j] = node[lo, j]
        log_forward(node, lo, n, edge, edge_off[g], shared, SUM, la, noi, no2, no3, no2)
        log_backward(node, lo, n, edge, edge_off[g], shared, SUM, lb, no2, no3, no2)
        # element by element, not alpha[lo:lo + n] = la: see kernels.copy_into
        for t in range(n):
            for j in range(K):
                alpha[lo + t, j] = la[t, j]
                beta[lo + t, j] = lb[t, j]
        log_z[g] = logsumexp_1d(la[n - 1])
    return alpha, beta, log_z


def chain_log_messages(batch: GraphBatch, node: np.ndarray, edge: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Log-space forward and backward messages of every chain of ``batch``.

    Returns ``log_alpha`` (N, K): log of the summed scores of the labellings of positions
    ``0..t`` ending in each label (node ``t`` included), ``log_beta`` (N, K): of positions
    ``t+1..`` given the label at ``t`` (node ``t`` excluded), and ``log_z`` (G,); so
    ``log_alpha + log_beta - log_z`` are the log node marginals (Rabiner 1989, eqs. 18-27).
    """
    check_chain_batch(batch, "chain messages")
    node, edge = check_potentials(batch, node, edge)
    return _messages_kernel(node, edge, _int64(batch.node_offsets), _int64(batch.edge_offsets))


def _int64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


@njit(cache=True)
def _spans_kernel(node, edge, node_off, edge_off, alpha, beta, log_z, graph, start, end, kind,
                  label_type, continues, tags_mode, labels):
    """Log-probability of each span (module docstring): the window from ``start - 1`` (chunk
    mode) or ``start`` (tags mode) to ``end + 1`` recomputed between the unconstrained messages,
    with the node constraints (chunk: the type at ``start``; tags: the labels ``start..end``)
    and the pair constraints (into the start: not continuing; inside a chunk: continuing; out of
    the end: not continuing)."""
    K = node.shape[1]
    shared = edge.shape[0] == 1
    out = np.empty(graph.shape[0])
    v = np.empty(K)
    w = np.empty(K)
    col = np.empty(K)
    for x in range(graph.shape[0]):
        g, s, e = graph[x], start[x], end[x]
        lo = node_off[g]
        n = node_off[g + 1] - lo
        a = s if tags_mode or s == 0 else s - 1
        b = e + 1 if e + 1 < n else e
        for t in range(a, b + 1):
            for j in range(K):
                # node constraint at t
                ok = True
                if tags_mode:
                    if s <= t <= e:
                        ok = j == labels[lo + t]
                elif t == s:
                    ok = label_type[j] == kind[x]
                if t == a:
                    v[j] = alpha[lo + t, j] if ok else -np.inf
                    continue
                if not ok:
                    w[j] = -np.inf
                    continue
                et = 0 if shared else edge_off[g] + t - 1
                for i in range(K):
                    c = continues[i, j]
                    if t == s or t == e + 1:
                        allowed = not c
                    elif not tags_mode and s < t <= e:
                        allowed = c
                    else:
                        allowed = True
                    col[i] = v[i] + edge[et, i, j] if allowed else -np.inf
                w[j] = logsumexp_1d(col) + node[lo + t, j]
            if t > a:
                copy_into(v, w)
        for j in range(K):
            col[j] = v[j] + beta[lo + b, j]
        out[x] = logsumexp_1d(col) - log_z[g]
    return out


def span_log_probabilities(batch: GraphBatch, node: np.ndarray, edge: np.ndarray,
                           spans: Spans, scheme: ChunkScheme, *, match: str = "chunk",
                           labels: np.ndarray | None = None,
                           messages: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
                           ) -> np.ndarray:
    """Log-probability (S,) of each span under the chain CRF with log-potentials ``node`` (N, K)
    and ``edge`` (E, K, K) or (1, K, K) (module docstring).

    Parameters
    ----------
    batch : GraphBatch
        Chains only.
    spans : Spans
    scheme : ChunkScheme
        The tag of each of the K labels.
    match : {"chunk", "tags"}
        ``"chunk"``: the span is a chunk of the labelling; ``"tags"``: the span's tags, read from
        ``labels``, are exactly right and the next tag does not continue them (Culotta &
        McCallum 2004).
    labels : ndarray (N,), optional
        The labelling the spans' tags come from (``match="tags"`` only).
    messages : tuple, optional
        ``chain_log_messages(batch, node, edge)``, when already computed.
    """
    check_chain_batch(batch, "span probabilities")
    node, edge = check_potentials(batch, node, edge)
    if node.shape[1] != scheme.n_labels:
        raise ValueError(f"scheme: {scheme.n_labels} tags for a model with {node.shape[1]} labels")
    if match not in ("chunk", "tags"):
        raise ValueError(f"match must be 'chunk' or 'tags'; got {match!r}")
    spans.check(batch, scheme)
    if match == "tags":
        if labels is None:
            raise ValueError("match='tags' needs labels=, the labelling the spans' tags come from")
        labels = batch.check_labels(labels, scheme.n_labels)
    alpha, beta, log_z = messages if messages is not None else chain_log_messages(batch, node, edge)
    return _spans_kernel(node, edge, _int64(batch.node_offsets), _int64(batch.edge_offsets),
                         np.ascontiguousarray(alpha, dtype=np.float64),
                         np.ascontiguousarray(beta, dtype=np.float64),
                         np.ascontiguousarray(log_z, dtype=np.float64),
                         _int64(spans.graph), _int64(spans.start), _int64(spans.end),
                         _int64(spans.type), _int64(scheme.label_type),
                         np.ascontiguousarray(scheme.continues, dtype=np.bool_), match == "tags",
                         _int64(labels if labels is not None else np.zeros(0)))
