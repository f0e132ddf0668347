"""Bad data met at fit time gives one clear line: labels through pm.Data out of range or NaN, and
graphs given as networkx graphs (converted to a GraphBatch)."""

import networkx as nx
import numpy as np
import pymc as pm
import pytensor.sparse as ps
import pytensor.tensor as pt
import pytest
import scipy.sparse as sp
from pymc.logprob.utils import ParameterValueError

import pymc_crf as pmc
from pymc_crf.distributions.crf import crf_log_potentials
from pymc_crf.graphs import as_graph_batch
from pymc_crf.model.spec import extract_crf

BATCH = pmc.GraphBatch.chains([3, 2])
LABELS = np.array([[0, 1, 1], [1, 0, -1]])  # padded (graph, position)


def _data_model(labels=LABELS):
    with pm.Model() as model:
        y = pm.Data("y", labels)
        w = pm.Normal("w", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("t", graphs=BATCH, edge_weights=w, observed=y)
    return model


def _one_line_error(excinfo, *parts):
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    for part in parts:
        assert part in msg, msg


@pytest.mark.parametrize("method", ["map", "nuts", "ep", "predictive_ard", "bethe_mh",
                                    "bethe_laplace"])
def test_out_of_range_data_labels_fail_at_fit_time(method):
    model = _data_model()
    bad = LABELS.copy()
    bad[1, 1] = 5
    pm.set_data({"y": bad}, model=model)
    with pytest.raises(ValueError) as exc:
        pmc.fit(model, method=method, progressbar=False)
    _one_line_error(exc, "observed labels of 't'", "label 5 at node 1 of graph 1",
                    "outside 0..1")
    assert "HCRF" not in str(exc.value)  # the label is the problem, not the kind of model


@pytest.mark.parametrize("method", ["ep", "predictive_ard", "bethe_laplace"])
@pytest.mark.parametrize("extra", ["potential", "observed"])
def test_weight_space_fitters_refuse_other_likelihood_terms(method, extra):
    """A fitter that approximates the CRF's weight posterior alone would leave a pm.Potential or
    another observed variable out of the posterior; it says so instead."""
    with pm.Model() as model:
        w = pm.Normal("w", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("t", graphs=BATCH, edge_weights=w, observed=LABELS)
        if extra == "potential":
            pm.Potential("pen", -100.0 * (w**2).sum())
        else:
            pm.Normal("z", w[0, 0], 0.01, observed=5.0)
    with pytest.raises(ValueError) as exc:
        pmc.fit(model, method=method, progressbar=False)
    _one_line_error(exc, f"method={method!r}", "pen" if extra == "potential" else "'z'",
                    "leave out")


def test_nan_data_labels_are_missing_at_fit_time():
    """NaN through pm.Data marks a missing label (summed out), as NaN in ``observed=`` does:
    the MAP equals the one with that label given as -1."""
    model = _data_model(LABELS.astype(float))
    gap = LABELS.astype(float)
    gap[0, 2] = np.nan
    pm.set_data({"y": gap}, model=model)
    assert extract_crf(model).labels.tolist() == [0, 1, -1, 1, 0]
    minus_one = LABELS.copy()
    minus_one[0, 2] = -1
    with pm.Model() as reference:
        w = pm.Normal("w", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("t", graphs=BATCH, edge_weights=w, observed=minus_one)
    got = pmc.fit(model, method="map", progressbar=False).posterior["w"].values
    want = pmc.fit(reference, method="map", progressbar=False).posterior["w"].values
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_logp_graph_checks_the_label_range():
    """The check is in the logp graph itself, so PyMC's own samplers and optimisers raise it."""
    with pm.Model():
        w = pm.Normal("w", 0.0, 1.0, shape=(2, 2))
        crf = pmc.CRF("t", graphs=BATCH, edge_weights=w, observed=LABELS)
    good = pm.logp(crf, LABELS).eval({w: np.zeros((2, 2))}, mode="FAST_COMPILE")
    np.testing.assert_allclose(good, -np.array([3, 2]) * np.log(2))  # uniform CRF at w = 0
    bad = LABELS.copy()
    bad[0, 0] = 2
    with pytest.raises(ParameterValueError, match=r"CRF labels must lie in 0\.\.1"):
        pm.logp(crf, bad).eval({w: np.zeros((2, 2))}, mode="FAST_COMPILE")


def test_networkx_graphs_are_a_batch():
    graphs = [nx.path_graph(3), nx.cycle_graph(4)]
    batch = as_graph_batch(graphs)
    assert batch.n_graphs == 2 and list(batch.n_nodes) == [3, 4] and batch.n_edges == 6
    assert as_graph_batch(nx.path_graph(3)).n_graphs == 1 and as_graph_batch(batch) is batch
    y = np.array([0, 1, 1, 0, 1, 1, 0])
    lls = []
    for g in (graphs, pmc.GraphBatch.from_networkx(graphs)):
        with pm.Model() as model:
            w = pm.Normal("w", 0.0, 1.0, shape=(2, 2))
            pmc.CRF("t", graphs=g, edge_weights=w, observed=y)
        res = pmc.fit(model, method="map", progressbar=False)
        lls.append(res["log_likelihood"]["t"].values)
    np.testing.assert_allclose(lls[0], lls[1])


@pytest.mark.parametrize(("graphs", "message"), [
    ([nx.path_graph(3), [(0, 1)]], "graphs[1] is a list"),
    ([], "non-empty list of networkx graphs; got list"),
    ("chain", "got str"),
])
def test_bad_graphs_name_the_problem(graphs, message):
    with pm.Model(), pytest.raises(TypeError) as exc:
        w = pm.Normal("w", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("t", graphs=graphs, edge_weights=w, observed=np.zeros(3, int))
    _one_line_error(exc, message)


def test_networkx_graph_for_mrf_and_hcrf():
    mrf = pmc.MRF.dist(graphs=nx.cycle_graph(4), edge_weights=0.5, parameterization="ising",
                       n_samples=2)
    assert mrf.owner.op.batch.n_edges == 4 and mrf.owner.op.batch.kinds[0] == "loopy"
    X = np.random.default_rng(0).normal(size=(5, 2))
    with pm.Model():
        tx = pm.Normal("theta_x", 0, 1, shape=(2, 2))
        ty = pm.Normal("theta_y", 0, 1, shape=(2, 3))
        te = pm.Normal("theta_e", 0, 1, shape=(2, 2, 3))
        h = pmc.HCRF("h", graphs=[nx.path_graph(3), nx.path_graph(2)], node_features=X,
                     theta_x=tx, theta_y=ty, theta_e=te, observed=np.array([0, 2]))
    assert h.owner.op.batch.n_graphs == 2


def test_symbolic_features_are_refused_with_a_clear_error():
    # features in pm.Data are refused by name, not with numpy's "setting an array element with a
    # sequence": they are fixed data (batch checks, engines and feature products are built from their
    # values), so a variable whose value pm.set_data could change is refused by name
    X = np.random.default_rng(0).normal(size=(5, 2))
    Xe = np.ones((BATCH.n_edges, 1))
    y = np.array([0, 1, 1, 1, 0])
    with pm.Model(), pytest.raises(ValueError) as exc:
        W = pm.Normal("W", 0, 1, shape=(2, 2))
        pmc.CRF("t", graphs=BATCH, node_features=pm.Data("X", X), node_weights=W,
                edge_weights=np.zeros((2, 2)), observed=y)
    _one_line_error(exc, "CRF: node_features is a PyTensor", "pm.Data",
                    "numpy arrays or scipy.sparse matrices", "Labels (observed=) may be pm.Data")
    with pytest.raises(ValueError) as exc:
        crf_log_potentials(BATCH, edge_features=pt.matrix("Xe"),
                               edge_weights=np.zeros((1, 2, 2)))
    _one_line_error(exc, "CRF: edge_features is a PyTensor TensorVariable")
    with pm.Model(), pytest.raises(ValueError) as exc:
        tx = pm.Normal("theta_x", 0, 1, shape=(2, 2))
        pmc.HCRF("h", graphs=BATCH, node_features=pm.Data("X", X), theta_x=tx,
                 theta_y=np.zeros((2, 3)), theta_e=np.zeros((2, 2, 3)), observed=np.array([0, 2]))
    _one_line_error(exc, "HCRF: node_features is a PyTensor", "pm.Data")
    # a PyTensor constant is fixed data: taken as its value, dense or sparse
    W, T = np.array([[0.5, -0.2], [0.1, 0.3]]), np.array([[[0.4, -0.4], [0.0, 0.2]]])
    want = crf_log_potentials(BATCH, X, W, Xe, T)[:2]
    for x, xe in ((pt.constant(X), pt.constant(Xe)),
                  (ps.as_sparse_variable(sp.csr_matrix(X)), Xe)):
        got = crf_log_potentials(BATCH, x, W, xe, T)[:2]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g.eval(), w.eval())


def test_mrf_names_feature_arguments_it_does_not_take():
    with pytest.raises(TypeError, match="an MRF takes no node_features.*use pmc.CRF"):
        pmc.MRF.dist(graphs=nx.path_graph(3), node_features=np.zeros((3, 1)),
                     node_weights=np.zeros((3, 2)), n_samples=2)


def test_whole_number_options_are_checked():
    # 2.7 sweeps must not run as 2, nor True as 1: each count option refuses them by name
    from pymc_crf.inference import BeliefPropagation, TreeEP
    from pymc_crf.validation import whole_number

    assert whole_number(3.0, "n") == 3 and whole_number(0, "n", minimum=0) == 0
    assert whole_number(np.int64(4), "n") == 4 and whole_number(np.array(5.0), "n") == 5
    for bad in (2.7, True, "3", np.nan, np.inf, 0):
        with pytest.raises(ValueError, match="max_iter must be an integer >= 1"):
            BeliefPropagation(max_iter=bad)
    with pytest.raises(ValueError, match="max_iter must be an integer >= 1"):
        TreeEP(max_iter=1.5)
    with pytest.raises(ValueError, match="threads must be True, False or None"):
        BeliefPropagation(threads="yes")
    with pytest.raises(ValueError, match="n_irrelevant must be an integer >= 0"):
        pmc.datasets.bcrf_synthetic("chain", n_train=2, n_test=2, n_irrelevant=1.5)
    with pytest.raises(ValueError, match="n_train must be an integer >= 1; got 2.5"):
        pmc.datasets.bcrf_synthetic("chain", n_train=2.5, n_test=2)
    with pytest.raises(ValueError, match="n_test must be an integer >= 0; got -1"):
        pmc.datasets.bcrf_synthetic("chain", n_train=2, n_test=-1)


def test_class_indices_name_the_first_bad_entry():
    from pymc_crf.validation import class_indices

    np.testing.assert_array_equal(class_indices(np.array([0.0, 2.0]), "y"), [0, 2])
    assert class_indices(np.array([True, False]), "y").dtype == np.int64
    for bad, message in ((np.array([0.0, 1.5]), "y must be whole numbers; entry 1 is 1.5"),
                         (np.array([[0.0, 1.0], [np.nan, 0.0]]), "y contain NaN at entry 1, 0"),
                         (np.array([np.inf]), "y contain inf at entry 0"),
                         (np.array(["a"]), "y must be integers .*got dtype <U1")):
        with pytest.raises(ValueError, match=message):
            class_indices(bad, "y")
    with pytest.raises(ValueError, match="y contain -inf at row 1: use -1"):
        class_indices(np.array([1.0, -np.inf]), "y", lambda i: f"row {i[0]}", ": use -1")
    # the hint is about missing-label markers: a fraction or a string is not one
    for bad in (np.array([1.0, 0.5]), np.array(["a"])):
        with pytest.raises(ValueError) as exc:
            class_indices(bad, "y", lambda i: f"row {i[0]}", ": use -1")
        assert "use -1" not in str(exc.value)


def test_flag_options():
    from pymc_crf.validation import flag

    for ok, want in ((True, True), (np.False_, False), (np.array(True), True), (0, False),
                     (1, True)):
        assert flag(ok, "f") is want
    for bad in ("False", 2, 0.0, None, np.array([True])):
        with pytest.raises(ValueError, match="f must be True or False; got"):
            flag(bad, "f")
    with pytest.raises(ValueError, match="bias must be True or False; got 'False'"):
        pmc.FeatureVectorizer(bias="False").fit([[{"w": "a"}]])


def test_positive_number_options():
    from pymc_crf.validation import positive_number

    assert positive_number(2, "a") == 2.0 and positive_number(np.array(0.5), "a") == 0.5
    assert positive_number(0, "a", allow_zero=True) == 0.0
    assert positive_number(np.inf, "a", allow_inf=True) == np.inf
    for bad in (0, -1.0, True, "1", np.nan, np.inf, None):
        with pytest.raises(ValueError, match="a must be a number > 0 and finite; got"):
            positive_number(bad, "a")
    with pytest.raises(ValueError, match="a must be a number >= 0; got -1"):
        positive_number(-1, "a", allow_zero=True, allow_inf=True)


def test_sampler_and_draw_counts_are_whole_numbers():
    from pymc_crf.fitters.evidence.ais import ais_log_evidence, default_schedule
    from pymc_crf.inference import Gibbs

    for kw, name in (({"burn_in": 0.5}, "burn_in"), ({"thin": 1.5}, "thin"),
                     ({"n_samples": 2.5}, "n_samples")):
        with pytest.raises(ValueError, match=f"{name} must be an integer"):
            Gibbs(**kw)
    b = pmc.GraphBatch.chains([3])
    with pytest.raises(ValueError, match="n_samples must be an integer >= 1; got 1.5"):
        Gibbs().run(b, np.zeros((3, 2)), np.zeros((1, 2, 2)), n_samples=1.5)
    from pymc_crf.inference import BruteForce, ChainEngine

    for engine in (ChainEngine(), BruteForce()):
        with pytest.raises(ValueError, match="n_samples must be an integer >= 0; got 2.5"):
            engine.sample(b, np.zeros((3, 2)), np.zeros((1, 2, 2)), 2.5)
    with pytest.raises(ValueError, match="n_temps must be an integer >= 1; got 2.5"):
        default_schedule(2.5)
    with pytest.raises(ValueError, match="n_runs must be an integer >= 2; got 1"):
        ais_log_evidence(None, None, None, n_runs=1, n_temps=3)
    with pytest.raises(ValueError, match="n_leapfrog must be an integer >= 1; got 0.5"):
        ais_log_evidence(None, None, None, n_temps=3, n_leapfrog=0.5)
    train, _ = pmc.datasets.bcrf_synthetic("chain", n_train=2, n_test=0, n_nodes=3)
    with pm.Model() as model:
        w = pm.Normal("w", 0.0, 1.0, shape=train.edge_features.shape[1:] + (2, 2))
        pmc.CRF("t", graphs=train.graphs, edge_features=train.edge_features, edge_weights=w,
                potential="probit", observed=train.labels)
    for method in ("ep", "bethe_laplace"):
        with pytest.raises(ValueError, match="draws must be an integer >= 1; got 2.5"):
            pmc.fit(model, method=method, draws=2.5, progressbar=False)
        with pytest.raises(ValueError, match="chains must be an integer >= 1; got 0"):
            pmc.fit(model, method=method, chains=0, progressbar=False)


def test_complex_potentials_are_refused():
    from pymc_crf.inference import BeliefPropagation, ChainEngine

    b = pmc.GraphBatch.chains([3])
    node = np.zeros((3, 2), complex)
    for eng in (ChainEngine(), BeliefPropagation()):
        with pytest.raises(ValueError, match="must be real numbers"):
            eng.log_partition(b, node, np.zeros((1, 2, 2)))


def test_impute_and_predict_check_draws():
    rng = np.random.default_rng(0)
    batch = pmc.GraphBatch.chains([3, 3])
    X = rng.normal(size=(6, 2))
    y = np.ma.masked_array(rng.integers(0, 2, 6), mask=[0, 1, 0, 0, 0, 1])
    with pm.Model() as m:
        W = pm.Normal("W", 0, 1, shape=(2, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, observed=y)
    r = pmc.fit(m, method="map", progressbar=False)
    for bad in (0, 2.5, -1):
        with pytest.raises(ValueError, match=r"draws \(None for all draws\) must be an integer"):
            pmc.impute(r, m, draws=bad)
    data = pmc.CRFData(batch, rng.integers(0, 2, 6), node_features=X)
    with pytest.raises(ValueError, match=r"draws \(None for all draws\) must be an integer"):
        pmc.predict(r, data, model=m, draws=0)


def test_labels_swapped_by_set_data_are_checked_for_layout():
    # a new shape gave only "total size of new array must be unchanged"; padding other than -1
    # was ignored (constant labels and pad_labels refuse it)
    b = pmc.GraphBatch.chains([3, 2])
    X = np.random.default_rng(0).normal(size=(5, 2))
    with pm.Model() as m:
        lab = pm.Data("lab", pmc.pad_labels(b, np.array([0, 1, 0, 1, 1]), 2))
        W = pm.Normal("W", 0, 1, shape=(2, 2))
        pmc.CRF("y", graphs=b, node_features=X, node_weights=W, observed=lab)
    before = m.compile_logp()(m.initial_point())
    for bad in (np.zeros((3, 3), int), np.array([[0, 1, 0], [1, 1, 0]])):
        pm.set_data({"lab": bad}, model=m)
        with pytest.raises(ValueError, match=r"the \(2, 3\) \(graphs, max nodes\) matrix"):
            m.compile_logp()(m.initial_point())
    pm.set_data({"lab": np.array([[0, 1, 0], [1, 1, -1]])}, model=m)
    assert m.compile_logp()(m.initial_point()) == pytest.approx(before)


def test_public_options_are_read_strictly():
    """Options of the public API that were misread or truncated silently ("False" read as True,
    1.9 as a treewidth limit below 2, 2.5 as 2) are refused by name."""
    from pymc_crf.inference import BeliefPropagation, BruteForce, JunctionTree, get_engine
    from pymc_crf.inference.linear_response import linear_response_vector_product

    b = pmc.GraphBatch.grid(2, 2)
    with pytest.raises(ValueError, match="missing must be True or False; got 'False'"):
        pmc.pad_labels(b, [0, np.nan, 1, 0], missing="False")
    with pytest.raises(ValueError, match="standardise must be True or False"):
        pmc.datasets.japanese_vowels(standardise="False")
    with pytest.raises(ValueError, match="normalize must be True or False"):
        pmc.cvm_score(np.zeros(3), np.ones(3), normalize="False")
    with pytest.raises(ValueError, match="warn must be True or False"):
        get_engine("bp", b, warn="False")
    for bad in (1.9, 2.5, True, "3", np.nan):
        with pytest.raises(ValueError, match="max_treewidth must be an integer >= 0"):
            get_engine("auto", b, max_treewidth=bad)
        with pytest.raises(ValueError, match="max_treewidth must be an integer >= 0"):
            JunctionTree(max_treewidth=bad)
    with pm.Model(), pytest.raises(ValueError, match="max_treewidth must be an integer >= 0"):
        pmc.CRF("y", graphs=b, edge_weights=np.zeros((2, 2)), max_treewidth=1.9,
                observed=np.zeros(4, int))
    with pytest.raises(ValueError, match="max_table_entries must be an integer >= 1"):
        JunctionTree(max_table_entries=2.5)
    with pytest.raises(ValueError, match="max_configurations must be a number > 0"):
        BruteForce(max_configurations=np.nan)
    for bad in (True, "3", np.inf):
        with pytest.raises(ValueError, match="tol must be a number > 0 and finite"):
            BeliefPropagation(tol=bad)
    with pytest.raises(ValueError, match="damping must be a number"):
        BeliefPropagation(damping=None)
    node, edge = np.zeros((4, 2)), np.zeros((1, 2, 2))
    with pytest.raises(ValueError, match="rtol must be below 1; got 2.5"):
        linear_response_vector_product(b, node, edge, node, edge, rtol=2.5)
    with pytest.raises(ValueError, match="maxiter must be an integer >= 1"):
        linear_response_vector_product(b, node, edge, node, edge, maxiter=0)
    with pytest.raises(ValueError, match="grid\\(\\): rows must be an integer >= 1; got 2.5"):
        pmc.GraphBatch.grid(2.5, 2)
    with pm.Model(), pytest.raises(ValueError, match="HCRF: n_states must be an integer >= 1; "
                                                     "got 2.5"):
        pmc.HCRF("y", graphs=pmc.GraphBatch.chains([2]), node_features=np.zeros((2, 1)),
                 theta_x=pt.zeros((1, 2)), theta_y=pt.zeros((2, 2)),
                 theta_e=pt.zeros((2, 2, 2)), n_states=2.5, observed=np.array([0]))
    pred = pmc.Prediction(np.full((4, 2), 0.5), np.zeros(4, int), "bpe")
    data = pmc.CRFData(b, np.zeros(4, int))
    with pytest.raises(ValueError, match="true_labels must be True or False"):
        pmc.plots.plot_marginals_chain(pred, data, true_labels="False")
    with pytest.raises(ValueError, match="show_errors must be True or False"):
        pmc.plots.plot_marginals_grid(pred, (2, 2), data, show_errors="False")
    for bad in (2.5, [0, 1.5], True):
        with pytest.raises(ValueError, match="graph must be a graph index or a list of them"):
            pmc.plots.plot_marginals_chain(pred, data, graph=bad)
    # data sets check what the fitters and the CLI read from them
    with pytest.raises(ValueError, match="CRFData: n_labels must be an integer >= 2; got 2.5"):
        pmc.CRFData(b, np.zeros(4, int), n_labels=2.5)
    with pytest.raises(ValueError, match="potential must be one of"):
        pmc.CRFData(b, np.zeros(4, int), potential="probt")


@pytest.mark.parametrize("bad", [2.5, -1, True, "0", np.nan])
def test_seeds_are_refused_by_name(bad):
    """A seed numpy cannot use is refused with the option's name (numpy's own message is
    "SeedSequence expects int"), wherever the package draws from it."""
    from pymc_crf.inference import BruteForce, Gibbs, JunctionTree

    m = _data_model()
    for method in ("map", "ep", "bethe_laplace", "nuts", "exchange"):
        with pytest.raises((TypeError, ValueError),
                           match=f"method='{method}': random_seed must be None, a non-negative"):
            pmc.fit(m, method=method, random_seed=bad, progressbar=False)
    with pytest.raises((TypeError, ValueError), match="method='nuts': random_seed must be"):
        pmc.fit(m, method="nuts", random_seed=[1, bad], progressbar=False)
    r = pmc.fit(m, method="map", progressbar=False)
    data = pmc.CRFData(BATCH, np.array([0, 1, 1, 1, 0]))
    with pytest.raises((TypeError, ValueError), match="random_seed must be None, a non-negative"):
        pmc.predict(r, data, model=m, random_seed=bad)
    with pytest.raises((TypeError, ValueError), match="seed must be None, a non-negative"):
        pmc.datasets.hmm_classes(seed=bad)
    with pytest.raises((TypeError, ValueError), match="seed must be None, a non-negative"):
        pmc.datasets.welling_parise_grid(2, 2, n_samples=3, seed=bad)
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        pmc.datasets.bcrf_synthetic("chain", n_train=2, n_test=2, seed=bad)
    with pytest.raises((TypeError, ValueError), match="seed must be None, a non-negative"):
        Gibbs(seed=bad)
    node, edge = np.zeros((5, 2)), np.zeros((1, 2, 2))
    for engine in (BruteForce(), JunctionTree(), Gibbs(burn_in=0, n_samples=1)):
        with pytest.raises((TypeError, ValueError), match="rng must be None, a non-negative"):
            engine.sample(BATCH, node, edge, 2, rng=bad)


def test_seeds_numpy_takes_still_work():
    from pymc_crf.validation import generator

    g = np.random.default_rng(1)
    assert generator(g, "s") is g
    for seed in (None, 0, np.int64(3), np.array(3), [1, 2], np.random.SeedSequence(4)):
        assert isinstance(generator(seed, "s"), np.random.Generator)
    assert generator(5, "s").random() == np.random.default_rng(5).random()
    # per-chain lists of seeds, as PyMC takes them
    m = _data_model()
    assert pmc.fit(m, method="map", random_seed=[1, 2], progressbar=False).attrs["method"] == "map"


def test_seeds_are_checked_before_the_work(monkeypatch):
    """The fitters' seed, and the evidence's AIS seed before its Laplace fit."""
    import pymc_crf.fitters.evidence.estimates as estimates
    from pymc_crf.inference import Gibbs
    from pymc_crf.inference.gibbs import independent_draws

    m = _data_model()
    with pytest.raises(TypeError, match="method='ep': random_seed must be"):
        pmc.fit(m, method="ep", random_seed=2.5, progressbar=False)

    def no_fit(*args, **kwargs):
        raise AssertionError("the Laplace fit ran before the seed was checked")

    monkeypatch.setattr(estimates, "laplace_fit", no_fit)
    with pytest.raises(TypeError, match="random_seed must be None"):
        pmc.log_marginal_likelihood(m, method="ais", random_seed=2.5)
    with pm.Model() as m:
        w = pm.Normal("w", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("t", graphs=BATCH, edge_weights=w,
                observed=np.ma.masked_array([0, 1, 1, 1, 0], mask=[0, 1, 0, 0, 0]))
    r = pmc.fit(m, method="map", progressbar=False)
    with pytest.raises(TypeError, match="random_seed must be None"):
        pmc.impute(r, m, random_seed=2.5)
    node, edge = np.zeros((5, 2)), np.zeros((1, 2, 2))
    with pytest.raises(TypeError, match="rng must be None"):  # even when nothing is drawn
        Gibbs().sample(BATCH, node, edge, 0, rng=2.5)
    with pytest.raises(TypeError, match="rng must be None"):
        independent_draws(BATCH, node, edge, 0, rng=2.5)


def test_gibbs_draws_zero_samples_like_the_exact_engines():
    from pymc_crf.inference import Gibbs, JunctionTree

    node, edge = np.zeros((5, 2)), np.zeros((1, 2, 2))
    for engine in (Gibbs(burn_in=0, n_samples=1), JunctionTree()):
        draws = engine.sample(BATCH, node, edge, 0, rng=0)
        assert draws.shape == (0, 5) and draws.dtype == np.int64
    with pytest.raises(ValueError, match="n_samples must be an integer >= 0"):
        Gibbs().sample(BATCH, node, edge, -1, rng=0)


def test_belief_propagation_threads_reads_zero_and_one_as_flags():
    from pymc_crf.inference import BeliefPropagation

    assert BeliefPropagation(threads=1).threads is True
    assert BeliefPropagation(threads=np.bool_(False)).threads is False
    assert BeliefPropagation(threads=None).threads is None
    for bad in (2, "False", 0.5):
        with pytest.raises(ValueError, match="threads must be True, False or None"):
            BeliefPropagation(threads=bad)


def test_from_edges_checks_node_counts_before_the_edges():
    # an empty graph gave "node id out of range 0..-1"
    with pytest.raises(pmc.GraphStructureError, match=r"graphs \[0\] have no nodes"):
        pmc.GraphBatch.from_edges([np.array([[0, 1]])], [0])
    with pytest.raises(pmc.GraphStructureError, match="n_nodes must be integers"):
        pmc.GraphBatch.from_edges([np.array([[0, 1]])], [2.5])
    with pytest.raises(pmc.GraphStructureError, match=r"node id out of range 0\.\.0"):
        pmc.GraphBatch.from_edges([np.array([[0, 1]])], [1])
    with pytest.raises(pmc.GraphStructureError, match="n_nodes must be a 1-d sequence of node"):
        pmc.GraphBatch.from_edges([np.array([[0, 1]])], 2)


def test_sequence_and_mrf_data_check_their_sizes():
    chains = pmc.GraphBatch.chains([3, 2])
    X = np.zeros((5, 2))
    ok = pmc.datasets.SequenceData(chains, X, np.array([0, 1]), 2)
    assert ok.n_classes == 2 and ok.node_features.dtype == np.float64
    with pytest.raises(ValueError, match="SequenceData: n_classes must be an integer >= 1"):
        pmc.datasets.SequenceData(chains, X, np.array([0, 1]), 2.5)
    with pytest.raises(ValueError, match=r"SequenceData: node features must have shape \(5, "):
        pmc.datasets.SequenceData(chains, np.zeros((4, 2)), np.array([0, 1]), 2)
    with pytest.raises(ValueError, match=r"SequenceData: raw must have one entry per frame \(5\)"):
        pmc.datasets.SequenceData(chains, X, np.array([0, 1]), 2, raw=np.zeros(4))
    with pytest.raises(TypeError, match="SequenceData: graphs must be a GraphBatch"):
        pmc.datasets.SequenceData([3, 2], X, np.array([0, 1]), 2)

    mrf = pmc.datasets.welling_parise_grid(2, 2, n_samples=3)
    graph, samples = mrf.graphs, mrf.samples
    b, w = mrf.node_weights, mrf.edge_weights
    again = pmc.datasets.MRFData(graph, samples, list(b), list(w), "ising")
    np.testing.assert_array_equal(again.log_potentials()[1], mrf.log_potentials()[1])
    with pytest.raises(ValueError, match=r"MRFData: node_weights must be 4 finite numbers, "
                                         r"shape \(4,\); got shape \(3,\)"):
        pmc.datasets.MRFData(graph, samples, b[:3], w, "ising")
    with pytest.raises(ValueError, match="MRFData: edge_weights .* with NaN or inf"):
        pmc.datasets.MRFData(graph, samples, b, np.full(4, np.nan), "ising")
    with pytest.raises(ValueError, match="MRFData: parameterization must be 'ising' or"):
        pmc.datasets.MRFData(graph, samples, b, w, "potts")
    with pytest.raises(ValueError, match="MRFData: n_labels must be 2 for the binary"):
        pmc.datasets.MRFData(graph, samples, b, w, "ising", n_labels=3)
    with pytest.raises(ValueError, match="MRFData: graphs must be a GraphBatch of one graph"):
        pmc.datasets.MRFData(pmc.GraphBatch.grid(2, 2, n_graphs=2), samples, b, w, "ising")
    with pytest.raises(TypeError, match="MRFData: graphs must be a GraphBatch .* got list"):
        pmc.datasets.MRFData([4], samples, b, w, "ising")
    with pytest.raises(ValueError, match="MRFData: node_weights must be 4 finite numbers; got 'abcd'"):
        pmc.datasets.MRFData(graph, samples, "abcd", w, "ising")


def test_data_generators_check_their_numbers():
    for bad in (np.nan, "0.5", None):
        with pytest.raises(ValueError, match="noise must be a number >= 0"):
            pmc.datasets.bcrf_synthetic("chain", n_train=2, n_test=2, noise=bad)
        with pytest.raises(ValueError, match="sd must be a number > 0"):
            pmc.datasets.welling_parise_grid(2, 2, n_samples=3, sd=bad)
        with pytest.raises(ValueError, match="d must be a number > 0"):
            pmc.datasets.parise_welling_random_structure(n_samples=3, d=bad)
        with pytest.raises(ValueError, match="edge_prob must be a number > 0"):
            pmc.datasets.parise_welling_random_structure(n_samples=3, edge_prob=bad)
    with pytest.raises(ValueError, match="edge_prob must lie in"):
        pmc.datasets.parise_welling_random_structure(n_samples=3, edge_prob=1.5)
    with pytest.raises(ValueError, match=r"n_nodes \(of a loop\) must be an integer >= 3; got 2"):
        pmc.datasets.bcrf_synthetic("loop", n_train=2, n_test=2, n_nodes=2)
    with pytest.raises(ValueError, match="n_nodes .* must be an integer >= 2; got 2.5"):
        pmc.datasets.bcrf_synthetic("chain", n_train=2, n_test=2, n_nodes=2.5)
    with pytest.raises(ValueError, match="n_test_per_class must be an integer >= 1; got 2.5"):
        pmc.datasets.hmm_classes(n_test_per_class=2.5)


def test_brute_force_refuses_graphs_too_large_when_the_model_is_built():
    # 2^25 labellings of a 5 x 5 grid were refused only at the first logp evaluation
    big = pmc.GraphBatch.grid(5, 5)
    with pm.Model(), pytest.raises(ValueError, match=r"brute_force: graph 0 has 2\^25 "
                                                     r"labellings, more than "
                                                     r"max_configurations=1000000; use"):
        pmc.CRF("y", graphs=big, edge_weights=np.zeros((2, 2)), inference="brute_force",
                observed=np.zeros(25, int))
    with pm.Model() as m:  # within the limit it builds and evaluates
        pmc.CRF("y", graphs=pmc.GraphBatch.grid(3, 3), edge_weights=np.zeros((2, 2)),
                inference="brute_force", observed=np.zeros(9, int))
    assert m.compile_logp()({}) == pytest.approx(-9 * np.log(2))
    from pymc_crf.inference import BruteForce

    BruteForce(max_configurations=2 ** 25).check_size(big, 2)
    BruteForce().check_size(pmc.GraphBatch.chains([1100]), 1)  # one label: one labelling
    BruteForce(max_configurations=np.inf).check_size(pmc.GraphBatch.chains([1100]), 2)
    with pytest.raises(ValueError, match=r"graph 0 has 2\^1100 labellings"):  # no overflow
        BruteForce().check_size(pmc.GraphBatch.chains([1100]), 2)
    with pm.Model(), pytest.raises(ValueError, match=r"brute_force: graph 0 has 2\^25"):
        pmc.CRF("y", graphs=big, edge_weights=np.zeros((2, 2)), inference=BruteForce(),
                observed=np.zeros(25, int))


def test_a_wrong_shaped_value_given_to_pm_logp_is_named():
    """A numpy value has a static shape, so PyTensor shapes its indexing while the logp graph is
    built: the layout is checked before that, by name, for each distribution."""
    from pymc_crf.distributions.hcrf import from_sequences

    crf = pmc.CRF.dist(graphs=BATCH, edge_weights=np.eye(2))
    for value, got in ((np.array([0, 1, 1, 1, 0]), r"\(5,\)"), (np.zeros((2, 2), int), r"\(2, 2\)"),
                       (np.array([[0, 1, 1, -1], [1, 0, -1, -1]]), r"\(2, 4\)")):
        with pytest.raises(ValueError, match=r"CRF labels must be the \(2, 3\) .*got shape " + got):
            pm.logp(crf, value)
    with pytest.raises(ValueError, match="got a label past a graph's end"):
        pm.logp(crf, np.array([[0, 1, 1], [1, 0, 1]]))
    # missing labels in a constant value: through pad_labels, as missing_labels.md says
    assert np.isfinite(pm.logp(crf, pmc.pad_labels(BATCH, [[0, np.nan, 1], [1, 0]],
                                                   missing=True)).eval()).all()
    mrf = pmc.MRF.dist(graphs=pmc.GraphBatch.chains([3]), node_weights=np.zeros(3),
                       edge_weights=np.array(0.4), parameterization="ising", n_samples=2)
    with pytest.raises(ValueError, match=r"= \(N, 3\) matrix.*got shape \(2, 4\)"):
        pm.logp(mrf, np.zeros((2, 4), int))
    b, X = from_sequences([np.ones((2, 1)), np.zeros((3, 1))])
    kw = dict(graphs=b, node_features=X, theta_x=np.ones((1, 2)), theta_y=np.eye(2),
              theta_e=np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match=r"one class per graph, shape \(2,\); got shape \(3,\)"):
        pm.logp(pmc.HCRF.dist(**kw), np.array([0, 1, 1]))
    # a size would batch the HCRF's draws but not its likelihood: refused as pmc.CRF does
    for extra in ({"size": 3}, {"shape": (5,)}):
        with pytest.raises(ValueError, match=r"HCRF over this batch has shape \(2,\)"):
            pmc.HCRF.dist(**kw, **extra)
