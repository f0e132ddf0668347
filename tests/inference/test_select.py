"""Engine selection: auto order, named engines, refusal of engines without log Z, warnings."""

import warnings

import networkx as nx
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_crf as pmc
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference import (
    ApproximateInferenceWarning,
    BeliefPropagation,
    ChainEngine,
    Gibbs,
    JunctionTree,
    MeanField,
    TreeEP,
)
from pymc_crf.inference.select import ENGINE_NAMES, LOG_Z_ENGINE_NAMES, get_engine
from pymc_crf.ops.log_partition import LogPartition

LOOPY = GraphBatch.grid(3, 3)


def test_auto_picks_chain_then_junction_tree_then_bp():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(get_engine("auto", GraphBatch.chains([3, 4])), ChainEngine)
        assert isinstance(get_engine("auto", LOOPY), JunctionTree)
    with pytest.warns(ApproximateInferenceWarning, match="width above max_treewidth=2.*Bethe"):
        eng = get_engine("auto", GraphBatch.grid(4, 4), max_treewidth=2)
    assert isinstance(eng, BeliefPropagation)


def test_auto_fallback_names_the_triangulation_width_and_the_way_to_exact_inference():
    # min-fill triangulates an 8 x 20 grid (treewidth 8) with width 11: "some graphs have
    # treewidth above 10" was false, and did not say that max_treewidth=11 makes it exact
    strip = GraphBatch.grid(8, 20, n_graphs=2)
    with pytest.warns(ApproximateInferenceWarning) as rec:
        get_engine("auto", strip)
    text = str(rec[0].message)
    assert "min_fill triangulation of 2 of 2 graphs has width above max_treewidth=10" in text
    assert "(graph 0: at least 11)" in text and "a larger max_treewidth" in text
    assert isinstance(get_engine("auto", strip, max_treewidth=11), JunctionTree)


@pytest.mark.parametrize(("name", "cls", "what", "absent"), [
    ("bp", BeliefPropagation, "the Bethe approximation", ("TreeEP", "mean-field")),
    ("bethe", BeliefPropagation, "the Bethe approximation", ("TreeEP", "mean-field")),
    ("tree_ep", TreeEP, "the TreeEP", ("Bethe", "mean-field")),
    ("mean_field", MeanField, "the mean-field lower bound", ("Bethe", "TreeEP")),
])
def test_approximate_engines_warn_with_the_name_of_their_approximation(name, cls, what, absent):
    with pytest.warns(ApproximateInferenceWarning) as rec:
        eng = get_engine(name, LOOPY)
    assert isinstance(eng, cls)
    text = str(rec[0].message)
    assert len(rec) == 1 and f"log Z is {what}" in text
    assert not any(a in text for a in absent)


def test_bp_and_tree_ep_on_forests_do_not_warn_that_log_z_is_approximate():
    """On a forest BP and TreeEP are exact (checked against brute force in their own tests), so
    naming them gives no approximation warning; mean field still warns."""
    forest = GraphBatch.from_edges([[(1, 0), (2, 1)], [(0, 1), (0, 2), (0, 3)], []], [3, 4, 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ("bp", "bethe", "tree_ep"):
            get_engine(name, forest)
    with pytest.warns(ApproximateInferenceWarning, match="mean-field"):
        get_engine("mean_field", forest)
    with pytest.warns(ApproximateInferenceWarning, match="Bethe"):
        get_engine("bp", LOOPY)


def test_the_approximation_warning_points_at_the_users_model_line():
    # pmc.CRF / pmc.MRF reach the engine through PyMC's Distribution.__new__: the warning named
    # that PyMC line, which a user cannot act on
    with pytest.warns(ApproximateInferenceWarning) as rec, pm.Model():
        pmc.CRF("y", graphs=LOOPY, edge_weights=np.zeros((2, 2)), observed=np.zeros(9, int),
                inference="bp")
        pmc.CRF("z", graphs=GraphBatch.grid(4, 4), edge_weights=np.zeros((2, 2)),
                observed=np.zeros(16, int), max_treewidth=2)
        pmc.MRF("x", graphs=LOOPY, edge_weights=np.zeros(12), parameterization="ising",
                observed=np.zeros((3, 9), int), inference="tree_ep")
    assert [r.filename for r in rec] == [__file__] * 3


def test_engines_without_log_z_are_refused_for_likelihoods_only():
    assert "gibbs" in ENGINE_NAMES and "gibbs" not in LOG_Z_ENGINE_NAMES
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a sampler says nothing about approximate log Z
        assert isinstance(get_engine("gibbs", LOOPY), Gibbs)  # marginals / sampling are fine
    msg = r"'gibbs' gives no estimate of log Z.*'bp'.*'tree_ep'"
    with pytest.raises(ValueError, match=msg):
        get_engine("gibbs", LOOPY, need_log_z=True)
    with pytest.raises(ValueError, match="gives no estimate of log Z"):
        get_engine(Gibbs(), LOOPY, need_log_z=True)
    with pytest.raises(ValueError, match="gives no estimate of log Z"):
        LogPartition(LOOPY, Gibbs())
    with pytest.raises(ValueError, match="gives no estimate of log Z"):
        pmc.log_partition(pt.dmatrix(), pt.tensor3(), LOOPY, inference="gibbs")


def test_crf_with_gibbs_fails_when_the_model_is_built():
    y = np.zeros(9, np.int64)
    with pm.Model(), pytest.raises(ValueError, match="gives no estimate of log Z"):
        w = pm.Normal("w", 0, 1, shape=(2, 2))
        pmc.CRF("y", graphs=LOOPY, edge_weights=w, observed=y, inference="gibbs")


def test_named_engines_that_cannot_run_say_why():
    loop = GraphBatch.from_networkx([nx.path_graph(3), nx.cycle_graph(4)])
    with pytest.raises(ValueError, match=r"chain engine: graph 1 \(loopy\) is not a canonical"):
        get_engine("chain", loop)
    with pytest.raises(ValueError, match=r"graph 0 has treewidth (at least )?3 .*max_treewidth=2"):
        get_engine("junction_tree", GraphBatch.grid(3, 3), max_treewidth=2)
    with pytest.raises(ValueError, match="unknown inference"):
        get_engine("loopy", loop)
    eng = TreeEP()
    assert get_engine(eng, loop) is eng


@pytest.mark.parametrize("name", ["chain", "junction_tree", "bp", "brute_force", "tree_ep",
                                  "mean_field"])
def test_a_graph_that_allows_no_labelling_is_neither_sampled_nor_decoded(name):
    """Node constraints x0 = 0, x1 = 1 against edges that force equal neighbours: Z = 0. An
    exact sampler could only return labellings of probability zero, so it says so instead."""
    b = GraphBatch.chains([3])
    node = np.array([[0, -np.inf], [-np.inf, 0], [0, 0]])
    edge = np.array([[[0, -np.inf], [-np.inf, 0]]] * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = get_engine(name, b)
    assert engine.log_partition(b, node, edge)[0] == -np.inf
    with pytest.raises(ValueError, match=r"graphs \[0\] allow no labelling"):
        engine.sample(b, node, edge, 3, 0)
    assert engine.sample(b, node, edge, 0, 0).shape == (0, 3)
    if engine.exact:  # nor a MAP to decode (the loopy engines warn instead: test_bp_trust)
        with pytest.raises(ValueError, match=r"allow no labelling.*nothing to decode"):
            engine.map_assignment(b, node, edge)
