"""Built-in data sets: deterministic in their seed, documented shapes, reachable modules."""

import re

import numpy as np
import pytest

import pymc_crf as pmc


def test_dataset_is_deterministic_and_documented_shape():
    a, _ = pmc.datasets.bcrf_synthetic("chain", n_train=5, n_test=0, seed=1)
    b, _ = pmc.datasets.bcrf_synthetic("chain", n_train=5, n_test=0, seed=1)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.edge_features, b.edge_features)
    assert a.true_weights["w"].size == 24 and a.graphs.is_chain
    with pytest.raises(ValueError, match="kind"):
        pmc.datasets.bcrf_synthetic("grid")


def test_bcrf_model_without_a_prior_sd_is_the_likelihood_alone():
    """``bcrf_model(data, None)`` puts a flat prior on the weights (``map`` is then the ML-CRF of
    thesis tables 5.1 / 5.2): the model's log density is the log-likelihood by enumeration of the
    8 labellings of each 3-node loop, at random weights."""
    from scipy.special import logsumexp

    from pymc_crf.potentials import log_potential_tables

    train, _ = pmc.datasets.bcrf_synthetic("loop", n_train=20, n_test=0, seed=3)
    g = train.graphs
    configs = np.indices((2, 2, 2)).reshape(3, -1).T  # (8, 3)
    local = (g.edges - np.repeat(g.node_offsets[:-1], 3)[:, None]).reshape(-1, 3, 2)
    assert np.all(g.n_nodes == 3) and np.all(local == local[0])
    y = train.labels.reshape(-1, 3)

    def log_likelihood(w):
        _, edge, _, _ = log_potential_tables("probit", 0.0, g.n_total_nodes, 2, None, None,
                                             train.edge_features, w)
        edge = edge.reshape(-1, 3, 2, 2)
        score = sum(edge[:, e][:, configs[:, i], configs[:, j]]
                    for e, (i, j) in enumerate(local[0]))  # (G, 8)
        seen = sum(edge[np.arange(len(y)), e, y[:, i], y[:, j]]
                   for e, (i, j) in enumerate(local[0]))
        return seen.sum() - logsumexp(score, axis=1).sum()

    model = pmc.datasets.bcrf_model(train, None)
    assert type(model["w"].owner.op).__name__ == "FlatRV"
    logp = model.compile_logp()
    for w in np.random.default_rng(0).normal(0.0, 2.0, (2, 6, 2, 2)):
        np.testing.assert_allclose(logp({"w": w}), log_likelihood(w), rtol=1e-12)
    with pytest.raises(ValueError, match="prior_sd"):
        pmc.datasets.bcrf_model(train, 0.0)


def test_generators_do_not_hide_their_modules():
    from pymc_crf.datasets import bcrf, hmm

    assert pmc.datasets.hmm_classes is hmm.hmm_classes
    assert pmc.datasets.bcrf_synthetic is bcrf.bcrf_synthetic
    assert pmc.datasets.SequenceData is hmm.SequenceData
    train, test = pmc.datasets.hmm_classes(2, 1, T=4, seed=0)
    assert isinstance(train, hmm.SequenceData) and train.labels.tolist() == [0, 0, 1, 1, 2, 2]
    assert test.node_features.shape == (3 * 4, 2)


def test_sequence_data_without_labels_can_be_classified():
    """New sequences to classify have no labels: SequenceData takes labels=None, as CRFData
    does (it raised "labels must have one class per graph ... got shape ()"), and pmc.predict
    gives the same class probabilities as with labels, without an error rate."""
    import pymc as pm

    rng = np.random.default_rng(0)
    b = pmc.GraphBatch.chains([3, 2, 4])
    X = rng.normal(size=(9, 2))
    new = pmc.datasets.SequenceData(b, X, None, 2)
    assert new.labels is None
    part = new.subset([2, 0])
    assert part.labels is None and part.graphs.n_nodes.tolist() == [4, 3]
    with pm.Model() as m:
        pmc.HCRF("y", graphs=b, node_features=X,
                 theta_x=pm.Normal("theta_x", 0, 1, shape=(2, 2)),
                 theta_y=pm.Normal("theta_y", 0, 1, shape=(2, 2)),
                 theta_e=pm.Normal("theta_e", 0, 1, shape=(2, 2, 2)), observed=[0, 1, 1])
    res = pmc.fit(m, method="map", jitter=0.1, random_seed=0, progressbar=False)
    labelled = pmc.predict(res, pmc.datasets.SequenceData(b, X, np.array([0, 1, 1]), 2))
    unlabelled = pmc.predict(res, new)
    assert unlabelled.error_rate is None and labelled.error_rate is not None
    np.testing.assert_allclose(unlabelled.marginals, labelled.marginals)


def test_japanese_vowels_shapes_and_labels():
    """The shipped Japanese Vowels split: the published sizes and class counts (README of the
    source), speakers 0..8, standardised with the training frames' statistics."""
    train, test = pmc.datasets.japanese_vowels()
    assert (train.n_graphs, test.n_graphs) == (270, 370)
    assert (train.graphs.n_total_nodes, test.graphs.n_total_nodes) == (4274, 5687)
    assert train.node_features.shape == (4274, 12) and test.node_features.shape == (5687, 12)
    assert train.graphs.is_chain and test.graphs.is_chain
    assert train.graphs.n_nodes.min() == 7 and test.graphs.n_nodes.max() == 29
    assert train.n_classes == 9 and train.labels.min() == 0 and test.labels.max() == 8
    np.testing.assert_array_equal(np.bincount(train.labels), np.full(9, 30))
    np.testing.assert_array_equal(np.bincount(test.labels), [31, 35, 88, 44, 29, 24, 40, 50, 29])
    np.testing.assert_allclose(train.node_features.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(train.node_features.std(axis=0), 1.0, atol=1e-12)
    raw, _ = pmc.datasets.japanese_vowels(standardise=False)
    assert raw.node_features[0, 0] == pytest.approx(1.860936)  # first frame as shipped


def test_subset_refuses_graph_ids_that_are_not_graphs():
    import pytest

    from pymc_crf.graphs.batch import GraphStructureError

    train, _ = pmc.datasets.bcrf_synthetic("chain", n_train=3, n_test=1, seed=0)
    assert train.subset([2, 0]).graphs.n_graphs == 2
    for bad in ([0.5], [-1], [3]):
        with pytest.raises(GraphStructureError, match="graph id"):
            train.subset(bad)


def test_dataset_coords_work_with_az_summary():
    # ArviZ's summary names its output dim "label" and refuses variables with such a dim
    import arviz as az
    import pymc as pm

    train, _ = pmc.datasets.bcrf_synthetic("chain", n_train=4, n_test=2, seed=0)
    assert "label" not in train.coords
    X = np.random.default_rng(0).normal(size=(train.graphs.n_total_nodes, 2))
    coords = {**train.coords, "node_feature": [0, 1]}
    with pm.Model(coords=coords) as m:
        W = pm.Normal("W", 0.0, 1.0, dims=("node_feature", "node_label"))
        T = pm.Normal("T", 0.0, 1.0, dims=("label_i", "label_j"))
        pmc.CRF("y", graphs=train.graphs, node_features=X, node_weights=W, edge_weights=T,
                observed=train.labels)
    res = pmc.fit(m, method="bethe_laplace", draws=20, random_seed=0, progressbar=False)
    table = az.summary(res)
    assert len(table) == 2 * 2 + 2 * 2


def test_crf_data_takes_networkx_graphs_and_names_other_graphs():
    """Graphs as pmc.CRF takes them; None or an array failed with "'NoneType' object has no
    attribute 'check_labels'" (or 'check_features')."""
    import networkx as nx

    X = np.ones((3, 1))
    data = pmc.CRFData(nx.path_graph(3), np.array([0, 1, 0]), X, n_labels=2)
    assert isinstance(data.graphs, pmc.GraphBatch) and data.graphs.is_chain
    for bad in (None, np.zeros((2, 2))):
        with pytest.raises(TypeError, match="graphs must be a GraphBatch, a networkx graph"):
            pmc.CRFData(bad, None, X, n_labels=2)


def test_readers_name_the_data_folder_they_looked_in(tmp_path, monkeypatch):
    """Without the file, the error says which folder was read: the one PYMC_CRF_DATA names
    (not "set PYMC_CRF_DATA", which is set), or the default beside the repository."""
    monkeypatch.setenv("PYMC_CRF_DATA", str(tmp_path))
    named = f"{re.escape(str(tmp_path))} as PYMC_CRF_DATA names it"
    with pytest.raises(FileNotFoundError, match=named) as err:
        pmc.datasets.read_conll2000("train")
    assert "set PYMC_CRF_DATA" not in str(err.value)
    with pytest.raises(FileNotFoundError, match="PYMC_CRF_DATA names it"):
        pmc.datasets.read_ptb_sample()
    monkeypatch.setenv("PYMC_CRF_DATA", "")
    monkeypatch.setattr("pymc_crf.datasets.text.data_dir", lambda name="": tmp_path / name)
    with pytest.raises(FileNotFoundError, match=r"\.\./shared/data beside the repository \(set "
                                                "PYMC_CRF_DATA"):
        pmc.datasets.read_conll2000("train")
