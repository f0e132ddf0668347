"""``pmc.predict(..., predictions=True)``: the prediction stored as a ``predictions`` group."""

import numpy as np
import pytest

import pymc_crf as pmc
from pymc_crf.datasets import CRFData


@pytest.fixture(scope="module")
def fitted(loop_model, loop_data):
    """A MAP fit of the loop model and new data of two chains of different lengths (padding)."""
    train = loop_data[0]
    graphs = pmc.GraphBatch.chains([2, 4])
    rng = np.random.default_rng(0)
    new = CRFData(graphs, rng.integers(0, 2, size=6),
                  edge_features=rng.normal(size=(graphs.n_edges, train.edge_features.shape[1])),
                  n_labels=2)
    return pmc.fit(loop_model, method="map", progressbar=False), new


def test_predictions_group_holds_what_predict_returns(fitted):
    result, new = fitted
    pred = pmc.predict(result, new, method="average", predictions=True)
    grp = result["predictions"]
    assert grp["t_marginals"].dims == ("graph", "position", "label")
    assert grp["t_marginals"].shape == (2, 4, 2) and grp["t_labels"].shape == (2, 4)
    assert grp.attrs["predict_method"] == "average"
    # the observed_data's own dims name the new group's, padded as the observed labels are
    assert result["observed_data"]["t"].dims == grp["t_labels"].dims
    marg, labels = grp["t_marginals"].values, grp["t_labels"].values
    np.testing.assert_array_equal(marg[0, :2], pred.marginals[:2])
    np.testing.assert_array_equal(marg[1], pred.marginals[2:])
    assert np.isnan(marg[0, 2:]).all() and (labels[0, 2:] == -1).all()
    np.testing.assert_array_equal(pmc.unpad_labels(new.graphs, labels), pred.labels)
    const = result["predictions_constant_data"]
    np.testing.assert_array_equal(const["edge_features"].values, new.edge_features)
    np.testing.assert_array_equal(const["n_nodes"].values, [2, 4])
    assert "t" not in grp  # labellings only when asked


def test_sampled_labellings_follow_the_predicted_marginals(fitted):
    """A MAP result has one weight draw, so the posterior predictive draws are exact CRF draws at
    it: their label frequencies converge to the exact marginals (4 standard errors)."""
    result, new = fitted
    n = 2000
    pred = pmc.predict(result, new, method="average", sample_labels=n, random_seed=1)
    draws = result["predictions"]["t"]
    assert draws.dims == ("chain", "draw", "graph", "position") and draws.shape == (1, n, 2, 4)
    flat = pmc.unpad_labels(new.graphs, draws.values[0])
    freq = (flat == 1).mean(axis=0)
    se = np.sqrt(pred.marginals[:, 1] * (1 - pred.marginals[:, 1]) / n)
    assert np.all(np.abs(freq - pred.marginals[:, 1]) < 4 * se + 1e-9)
    assert (draws.values[0, :, 0, 2:] == -1).all()
    again = pmc.predict(result, new, method="average", sample_labels=n, random_seed=1)
    np.testing.assert_array_equal(result["predictions"]["t"].values, draws.values)  # seeded
    assert again.labels.shape == pred.labels.shape


def test_predict_without_predictions_leaves_the_result_alone(loop_model, loop_data):
    result = pmc.fit(loop_model, method="map", progressbar=False)
    pmc.predict(result, loop_data[1], method="bpe")
    assert "predictions" not in result.children
    with pytest.raises(ValueError, match="sample_labels must be an integer >= 1"):
        pmc.predict(result, loop_data[1], method="bpe", sample_labels=-3)


def test_class_predictions_of_hidden_crfs_per_graph():
    """Hidden-CRF predictions are one class per graph: (graph, class) probabilities."""
    import xarray as xr

    from pymc_crf.model.prediction_group import add_predictions
    from pymc_crf.model.predictors import prediction

    result = xr.DataTree.from_dict({"observed_data": xr.Dataset({"c": (("seq",), [0, 2])})})
    graphs = pmc.GraphBatch.chains([3, 2, 4])
    new = CRFData(graphs, None, node_features=np.ones((9, 2)), n_labels=3)
    probs = np.array([[0.2, 0.5, 0.3], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8]])
    add_predictions(result, new, prediction(probs, probs.argmax(1), "hcrf_average"))
    grp = result["predictions"]
    assert grp["c_marginals"].dims == ("seq", "class")
    np.testing.assert_array_equal(grp["c_marginals"].values, probs)
    np.testing.assert_array_equal(grp["c_labels"].values, [1, 0, 2])
    np.testing.assert_array_equal(result["predictions_constant_data"]["node_features"], 1.0)
    with pytest.raises(ValueError, match="one class per graph"):
        add_predictions(result, new, prediction(probs, probs.argmax(1), "hcrf_average"),
                        sampled=np.zeros((2, 9), np.int64))
