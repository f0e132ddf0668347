"""Span probabilities by constrained forward-backward against brute-force enumeration."""

import numpy as np
import pytest
from helpers.brute_force import chain_labellings
from helpers.tables import chain_tables

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference import BruteForce, ChainEngine
from pymc_crf.inference.spans import (
    ChunkScheme,
    Spans,
    chain_log_messages,
    check_chain_batch,
    span_log_probabilities,
)
from pymc_crf.metrics import bio_chunks

BIO = ["O", "B-A", "I-A", "B-B", "I-B"]
BIOES = ["O", "B-A", "I-A", "E-A", "S-A"]


def _enumerate(batch, node, edge, g):
    """Every labelling of graph g (C, n) and its probability."""
    configs, log_prob = chain_labellings(batch, node, edge, g)
    return configs, np.exp(log_prob)


def test_scheme_chunks_equal_conlleval_bio():
    scheme = ChunkScheme(BIO)
    rng = np.random.default_rng(0)
    for _ in range(200):
        y = rng.integers(0, 5, size=7)
        ours = {(scheme.types[k], s, e) for k, s, e in scheme.chunks(y)}
        assert ours == bio_chunks([BIO[i] for i in y])


def test_bioes_scheme_reads_chunks():
    scheme = ChunkScheme(BIOES, "BIOES")
    t = {tag: i for i, tag in enumerate(BIOES)}
    seq = [t[x] for x in ["B-A", "I-A", "E-A", "S-A", "E-A", "O", "I-A", "B-A"]]
    assert scheme.chunks(seq) == [(0, 0, 2), (0, 3, 3), (0, 4, 4), (0, 6, 6), (0, 7, 7)]


@pytest.mark.parametrize("shared", [True, False])
def test_messages_equal_engine(shared):
    rng = np.random.default_rng(1)
    batch, node, edge = chain_tables(rng, [4, 1, 6, 3], 3, shared)
    alpha, beta, log_z = chain_log_messages(batch, node, edge)
    m = ChainEngine().marginals(batch, node, edge)
    np.testing.assert_allclose(log_z, m.log_z, rtol=1e-12)
    np.testing.assert_allclose(np.exp(alpha + beta - log_z[batch.node_graph][:, None]), m.node,
                               atol=1e-12)


@pytest.mark.parametrize(("tags", "scheme", "shared"),
                         [(BIO, "BIO", True), (BIO, "BIO", False), (BIOES, "BIOES", False)])
def test_every_span_against_enumeration(tags, scheme, shared):
    rng = np.random.default_rng(2)
    sch = ChunkScheme(tags, scheme)
    batch, node, edge = chain_tables(rng, [5, 1, 4], len(tags), shared)
    # every span of every graph and type, and the chunks of one labelling for match="tags"
    rows = [(g, s, e, k) for g in range(batch.n_graphs) for s in range(batch.n_nodes[g])
            for e in range(s, batch.n_nodes[g]) for k in range(len(sch.types))]
    spans = Spans(*(np.array(c) for c in zip(*rows, strict=True)))
    got = np.exp(span_log_probabilities(batch, node, edge, spans, sch))
    want = np.zeros(len(spans))
    for g in range(batch.n_graphs):
        configs, p = _enumerate(batch, node, edge, g)
        chunk_sets = [set(sch.chunks(c)) for c in configs]
        for i in np.flatnonzero(spans.graph == g):
            key = (spans.type[i], spans.start[i], spans.end[i])
            want[i] = sum(pi for pi, cs in zip(p, chunk_sets, strict=True) if key in cs)
    np.testing.assert_allclose(got, want, atol=1e-12)
    assert want.max() > 0.05  # the test is not vacuous


@pytest.mark.parametrize(("tags", "scheme"), [(BIO, "BIO"), (BIOES, "BIOES")])
def test_tags_match_against_enumeration(tags, scheme):
    rng = np.random.default_rng(3)
    sch = ChunkScheme(tags, scheme)
    batch, node, edge = chain_tables(rng, [5, 3], len(tags), False)
    labels = np.concatenate([rng.integers(0, len(tags), size=n) for n in batch.n_nodes])
    spans = Spans.of_labelling(batch, labels, sch)
    assert len(spans) > 1
    got = np.exp(span_log_probabilities(batch, node, edge, spans, sch, match="tags",
                                        labels=labels))
    for i in range(len(spans)):
        g, s, e = spans.graph[i], spans.start[i], spans.end[i]
        lo, n = batch.node_offsets[g], batch.n_nodes[g]
        configs, p = _enumerate(batch, node, edge, g)
        ok = (configs[:, s:e + 1] == labels[lo + s:lo + e + 1]).all(axis=1)
        if e + 1 < n:
            ok &= ~sch.continues[configs[:, e], configs[:, e + 1]]
        assert got[i] == pytest.approx(p[ok].sum(), abs=1e-12)


def test_impossible_transitions_and_brute_force_engine():
    # -inf entries (a BIO model that forbids O -> I-A) give probability 0 and no NaN
    rng = np.random.default_rng(4)
    sch = ChunkScheme(BIO)
    batch, node, edge = chain_tables(rng, [4], 5, True)
    edge[0, 0, 2] = -np.inf
    spans = Spans(np.array([0, 0]), np.array([1, 0]), np.array([2, 3]), np.array([0, 1]))
    lp = span_log_probabilities(batch, node, edge, spans, sch)
    assert np.all(np.isfinite(lp) | (lp == -np.inf)) and not np.isnan(lp).any()
    configs, p = _enumerate(batch, node, edge, 0)
    want = [sum(pi for pi, c in zip(p, configs, strict=True)
                if (k, s, e) in set(sch.chunks(c)))
            for k, s, e in ((0, 1, 2), (1, 0, 3))]
    np.testing.assert_allclose(np.exp(lp), want, atol=1e-12)
    np.testing.assert_allclose(chain_log_messages(batch, node, edge)[2],
                               BruteForce().log_partition(batch, node, edge), rtol=1e-12)


def test_bad_input_is_refused():
    sch = ChunkScheme(BIO)
    batch = GraphBatch.chains([3])
    node, edge = np.zeros((3, 5)), np.zeros((1, 5, 5))
    with pytest.raises(ValueError, match="scheme"):
        ChunkScheme(BIO, "IOB2")
    with pytest.raises(ValueError, match="not a BIO tag"):
        ChunkScheme(["O", "E-A"])
    with pytest.raises(ValueError, match="span 0"):
        span_log_probabilities(batch, node, edge, Spans(*(np.array([v]) for v in (0, 2, 3, 0))),
                               sch)
    with pytest.raises(ValueError, match="match"):
        span_log_probabilities(batch, node, edge, Spans.of_labelling(batch, [1, 2, 0], sch), sch,
                               match="exact")
    with pytest.raises(ValueError, match="labels="):
        span_log_probabilities(batch, node, edge, Spans.of_labelling(batch, [1, 2, 0], sch), sch,
                               match="tags")
    tree = GraphBatch.from_edges([np.array([[0, 1], [0, 2]])], [3])
    with pytest.raises(ValueError, match="chain CRFs; graph 0 is a tree"):
        span_log_probabilities(tree, node, np.zeros((2, 5, 5)), Spans.of_labelling(
            batch, [1, 2, 0], sch), sch)


def test_refusal_names_the_kind_of_graph():
    """The message reads 'graph 1 is a loopy graph', not 'is a loopy'."""
    batch = GraphBatch.from_edges([np.array([[0, 1]]), np.array([[0, 1], [1, 2], [2, 0]])], [2, 3])
    with pytest.raises(ValueError, match="graph 1 is a loopy graph "):
        check_chain_batch(batch, "span probabilities")
