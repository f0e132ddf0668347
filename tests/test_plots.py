"""pymc_crf.plots: the artists drawn carry the data they were given (Agg backend, tiny fits)."""

import json

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
import xarray as xr  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.container import ErrorbarContainer  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

import pymc_crf as pmc  # noqa: E402
from pymc_crf import plots  # noqa: E402
from pymc_crf.compare import cvm_score, posterior_matrix  # noqa: E402
from pymc_crf.inference import JunctionTree  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def fits():
    train, test = pmc.datasets.bcrf_synthetic("loop", n_train=3, n_test=4, seed=0)
    model = pmc.datasets.bcrf_model(train)
    point = pmc.fit(model, method="map")
    ep = pmc.fit(model, method="ep", draws=300, random_seed=0)
    # A sampled "reference" with no Gaussian fit group: EP's draws from another seed.
    ref = pmc.fit(model, method="ep", draws=300, random_seed=1).copy()
    del ref["fit"]
    return {"ref": ref, "ep": ep, "map": point, "test": test}


def _gauss(x, mu, sd):
    return np.exp(-0.5 * ((x - mu) / sd) ** 2) / (sd * np.sqrt(2 * np.pi))


def test_posterior_marginals_panels_hold_each_methods_marginal(fits):
    res = {k: fits[k] for k in ("ref", "ep", "map")}
    axes = plots.plot_posterior_marginals(res, reference="ref", sort=None, max_panels=3, bins=20)
    assert len(axes) == 3
    ref_m = posterior_matrix(fits["ref"])
    mean = fits["ep"]["fit"]["mean_vector"].values
    cov = fits["ep"]["fit"]["covariance_matrix"].values
    map_w = posterior_matrix(fits["map"])[0]
    for j, ax in enumerate(axes):
        assert ax.get_title() == f"w[0, {j // 2}, {j % 2}]"
        bars = [p for p in ax.patches if isinstance(p, Rectangle)]
        heights = np.array([b.get_height() for b in bars])
        lo = min(ref_m[:, j].min(), posterior_matrix(fits["ep"])[:, j].min())
        hi = max(ref_m[:, j].max(), posterior_matrix(fits["ep"])[:, j].max())
        expected, _ = np.histogram(ref_m[:, j], bins=np.linspace(lo, hi, 21), density=True)
        np.testing.assert_allclose(heights, expected, rtol=1e-12)
        curve, vline = ax.lines
        x, y = curve.get_data()
        np.testing.assert_allclose(y, _gauss(x, mean[j], np.sqrt(cov[j, j])), rtol=1e-10)
        assert vline.get_xdata()[0] == pytest.approx(map_w[j])
    assert [t.get_text() for t in axes[0].get_legend().get_texts()] == ["ref", "ep", "map"]


def test_posterior_marginals_sorted_worst_first_by_cvm(fits):
    res = {"ref": fits["ref"], "ep": fits["ep"]}
    axes = plots.plot_posterior_marginals(res, reference="ref", max_panels=None)
    assert len(axes) == 24
    a, b = posterior_matrix(fits["ep"]), posterior_matrix(fits["ref"])
    scores = np.array([cvm_score(a[:, j], b[:, j], normalize=True) for j in range(24)])
    shown = [ax.get_title().split("  (CVM")[0] for ax in axes]
    names = [f"w[{f}, {i}, {k}]" for f in range(6) for i in range(2) for k in range(2)]
    assert shown == [names[j] for j in np.argsort(-scores, kind="stable")]
    assert float(axes[0].get_title().split("CVM ")[1][:-1]) == pytest.approx(scores.max(), rel=1e-2)


def test_posterior_marginals_histogram_of_draws_without_gaussian(fits):
    res = {"ep": fits["ep"]}
    axes = plots.plot_posterior_marginals(res, gaussian=False, sort=None, max_panels=1, bins=10)
    x = posterior_matrix(fits["ep"])[:, 0]
    # a step histogram is one closed polygon: its top edges are the density heights
    (poly,) = axes[0].patches
    ys = poly.get_xy()[1:-1:2, 1]
    expected, _ = np.histogram(x, bins=10, density=True)
    np.testing.assert_allclose(ys, expected, rtol=1e-12)


def test_posterior_marginals_of_a_diagonal_gaussian_and_of_a_fit_group_without_one(fits):
    """A fit group with sd_vector (a diagonal Laplace) draws its Gaussian from the marginal sds;
    one with neither covariance nor sds (randomized MAP's map_vector) is a histogram."""
    diag = fits["ep"].copy()
    sd = np.sqrt(np.diag(diag["fit"]["covariance_matrix"].values))
    diag["fit"] = diag["fit"].to_dataset().drop_vars("covariance_matrix").assign(
        sd_vector=(("rows",), sd))
    no_gauss = fits["ref"].copy()
    no_gauss["fit"] = xr.Dataset({"map_vector": (("rows",), sd)})
    axes = plots.plot_posterior_marginals({"ref": no_gauss, "diag": diag}, reference="ref",
                                          sort=None, max_panels=1, bins=10)
    x, y = axes[0].lines[0].get_data()
    mean = diag["fit"]["mean_vector"].values
    np.testing.assert_allclose(y, _gauss(x, mean[0], sd[0]), rtol=1e-10)


def test_posterior_marginals_point_mass_is_a_vertical_line(fits):
    """A zero-variance Gaussian marginal (a weight predictive ARD pruned: its draws are all the
    mean) is a vertical line at the mean, not a density of 0 / 0."""
    ard = fits["ep"].copy()
    cov = ard["fit"]["covariance_matrix"].values.copy()
    cov[0, :] = cov[:, 0] = 0.0
    ard["fit"] = ard["fit"].to_dataset().assign(covariance_matrix=(("rows", "columns"), cov))
    w = ard["posterior"]["w"].values.copy()
    w[..., 0, 0, 0] = ard["fit"]["mean_vector"].values[0]
    ard["posterior"] = ard["posterior"].to_dataset().assign(w=(ard["posterior"]["w"].dims, w))
    with np.errstate(all="raise"):
        (ax,) = plots.plot_posterior_marginals({"ard": ard}, sort=None, max_panels=1)
    (line,) = ax.lines
    np.testing.assert_array_equal(line.get_xdata(), [w[0, 0, 0, 0, 0]] * 2)


def test_posterior_marginals_gaussian_beside_variables_it_does_not_cover(fits):
    """A learned prior scale ``s`` beside the weights' Gaussian (laplace with free scales):
    the weights keep their Gaussian density, ``s`` (not in the fit group) is a histogram."""
    lap = fits["ep"].copy()
    post = lap["posterior"].to_dataset()
    lap["posterior"] = post.assign(s=(("chain", "draw"), np.linspace(0.5, 1.5, post.sizes["draw"])[None]))
    axes = plots.plot_posterior_marginals({"lap": lap}, sort=None, max_panels=None)
    assert [a.get_title() for a in axes[[0, -1]]] == ["w[0, 0, 0]", "s"]
    mean = lap["fit"]["mean_vector"].values
    sd = np.sqrt(np.diag(lap["fit"]["covariance_matrix"].values))
    x, y = axes[0].lines[0].get_data()
    np.testing.assert_allclose(y, _gauss(x, mean[0], sd[0]), rtol=1e-10)
    assert not axes[-1].lines and len(axes[-1].patches) == 1  # a step histogram


def test_posterior_marginals_gaussian_reference_is_filled(fits):
    """A reference with a Gaussian fit group is drawn filled, like a reference histogram."""
    res = {"ep": fits["ep"], "ref": fits["ref"]}
    (ax,) = plots.plot_posterior_marginals(res, reference="ep", sort=None, max_panels=1)
    (fill,) = ax.collections
    assert fill.get_label() == "ep"
    mean = fits["ep"]["fit"]["mean_vector"].values[0]
    sd = np.sqrt(fits["ep"]["fit"]["covariance_matrix"].values[0, 0])
    top = fill.get_paths()[0].vertices
    top = top[top[:, 1] > 0]
    np.testing.assert_allclose(top[:, 1], _gauss(top[:, 0], mean, sd), rtol=1e-10)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["ep", "ref"]


def test_posterior_marginals_bad_input(fits):
    with pytest.raises(ValueError, match="reference 'nuts'"):
        plots.plot_posterior_marginals({"ep": fits["ep"]}, reference="nuts")
    with pytest.raises(ValueError, match="no posterior variable"):
        plots.plot_posterior_marginals({"ep": fits["ep"]}, var_names=["v"])
    _, ax = plt.subplots(1, 2)
    with pytest.raises(ValueError, match="needs 3 axes"):
        plots.plot_posterior_marginals({"ep": fits["ep"]}, max_panels=3, ax=ax)


def test_compare_bars_and_standard_errors():
    t1 = pd.DataFrame({"cvm": [0.0, 0.2, np.nan], "test_error": [0.3, 0.35, 0.4]},
                      index=pd.Index(["nuts", "ep", "map"], name="method"))
    t2 = t1.assign(cvm=[0.0, 0.4, np.nan], test_error=[0.3, 0.25, 0.5])
    axes = plots.plot_compare(pd.concat([t1, t2]), reference="nuts")
    assert [ax.get_title() for ax in axes] == ["cvm", "test_error"]
    widths = [[b.get_width() for b in ax.patches] for ax in axes]
    np.testing.assert_allclose(widths[0], [0.3, 0.0])
    np.testing.assert_allclose(widths[1], [0.3, 0.45])
    assert [t.get_text() for t in axes[0].get_yticklabels()] == ["ep", "map"]
    assert any(t.get_text() == "n/a" for t in axes[0].texts)
    # error bar of ep's test error: one standard error of (0.35, 0.25)
    (bars,) = (c for c in axes[1].containers if isinstance(c, ErrorbarContainer))
    seg = bars.lines[2][0].get_segments()[0]
    assert seg[1, 0] - seg[0, 0] == pytest.approx(2 * np.std([0.35, 0.25], ddof=1) / np.sqrt(2))
    with pytest.raises(ValueError, match="not in the table"):
        plots.plot_compare(t1, columns=["elpd"])


def test_compare_missing_values_labelled_inside_the_axes():
    """"n/a" stays in view on a log scale (wall times) and beside negative scores (elpd_loo)."""
    t = pd.DataFrame({"wall_time": [np.nan, 0.5, 30.0], "elpd_loo": [np.nan, -12.0, -8.0]},
                     index=pd.Index(["pm.sample", "map", "ep"], name="method"))
    axes = plots.plot_compare(t, columns=["wall_time", "elpd_loo"])
    assert axes[0].get_xscale() == "log"
    axes[0].figure.canvas.draw()
    for ax in axes:
        (text,) = ax.texts
        assert text.get_text() == "n/a"
        x = text.get_transform().transform(text.get_position())[0]
        assert ax.bbox.x0 <= x < ax.bbox.x0 + 0.1 * ax.bbox.width


def test_compare_from_pmc_compare(fits):
    table = pmc.compare({k: fits[k] for k in ("ref", "ep", "map")}, reference="ref")
    axes = plots.plot_compare(table, columns=["mean_abs_err", "wall_time"])
    np.testing.assert_allclose([b.get_width() for b in axes[0].patches],
                               table["mean_abs_err"].to_numpy())


def test_convergence_traces_match_diagnostics(fits):
    ep = fits["ep"]
    change, skipped, step = plots.plot_convergence(ep)
    assert change.get_yscale() == "log"
    lines = {ln.get_label(): ln for ln in change.lines}
    for v in ("change_mean", "change_cov"):
        np.testing.assert_array_equal(lines[v].get_ydata(), ep["diagnostics"][v].values)
        np.testing.assert_array_equal(lines[v].get_xdata(),
                                      np.arange(1, ep["diagnostics"].sizes["iteration"] + 1))
    assert lines["tol"].get_ydata()[0] == json.loads(ep.attrs["settings"])["tol"]
    np.testing.assert_array_equal(skipped.lines[0].get_ydata(), ep["diagnostics"]["skipped"].values)
    np.testing.assert_array_equal(step.lines[0].get_ydata(), ep["diagnostics"]["step_size"].values)
    (obj,) = plots.plot_convergence(fits["map"])
    np.testing.assert_array_equal(obj.lines[0].get_ydata(),
                                  fits["map"]["optimizer_result"]["objective_trace"].values)
    with pytest.raises(ValueError, match="no 'diagnostics'"):
        plots.plot_convergence(fits["ref"].copy().drop_nodes("diagnostics"))
    per_draw = xr.Dataset({"draw_iterations": (("chain", "draw"), np.ones((1, 3)))})
    with pytest.raises(ValueError, match=r"per draw \(\['draw_iterations'\]\)"):
        plots.plot_convergence(per_draw)


def test_convergence_axis_of_named_steps():
    """A trace recorded after every named update (the VI bound after init, pi, z, bp, theta)
    counts those updates on the x-axis, named by the text variable, not iterations."""
    steps = ["init"] + ["pi", "z", "bp", "theta"] * 2
    ds = xr.Dataset({"bound": ("iteration", np.linspace(-9.0, -4.0, len(steps))),
                     "step": ("iteration", steps), "n_iterations": ((), 2)})
    (ax,) = plots.plot_convergence(ds)
    assert ax.get_xlabel() == "step (init/pi/z/bp/theta)"
    np.testing.assert_array_equal(ax.lines[0].get_xdata(), np.arange(1, 10))


def test_convergence_axis_named_by_the_trace_dim_and_empty_traces_left_out():
    """Laplace with learned prior scales: the final MAP started at its optimum has an empty
    objective trace (no panel unless asked for), and the scale search's traces run over
    ``outer_iteration``, which labels their x-axis."""
    ds = xr.Dataset({"objective_trace": ("iteration", np.zeros(0)),
                     "log_evidence": ("outer_iteration", [-13.4, -12.2, -8.5]),
                     "n_iterations": ((), 0)})
    (ax,) = plots.plot_convergence(ds)
    assert ax.get_title() == "log_evidence" and ax.get_xlabel() == "outer iteration"
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), [-13.4, -12.2, -8.5])
    (empty,) = plots.plot_convergence(ds, var_names=["objective_trace"])
    assert empty.get_xlabel() == "iteration" and empty.lines[0].get_xdata().size == 0


def test_marginals_chain_image_and_markers(fits):
    test = fits["test"]
    pred = pmc.predict(fits["map"], test, method="bpe")
    ax = plots.plot_marginals_chain(pred, test, graph=[1, 3])
    nodes = test.graphs.node_index([1, 3])
    (image,) = ax.images
    np.testing.assert_array_equal(image.get_array(), pred.marginals[nodes].T)
    predicted, true = (c for c in ax.collections if isinstance(c, PathCollection))
    np.testing.assert_array_equal(predicted.get_offsets(),
                                  np.column_stack([np.arange(6), pred.labels[nodes]]))
    np.testing.assert_array_equal(true.get_offsets()[:, 1], test.labels[nodes])
    assert [ln.get_xdata()[0] for ln in ax.lines] == [2.5]  # one separator between the graphs
    ax2 = plots.plot_marginals_chain(pred)  # no data: every node in one row
    assert ax2.images[0].get_array().shape == (2, test.graphs.n_total_nodes)


def _grid_prediction(rows, cols, seed):
    rng = np.random.default_rng(seed)
    batch = pmc.GraphBatch.grid(rows, cols, n_graphs=2)
    node = rng.normal(size=(batch.n_total_nodes, 2))
    edge = rng.normal(size=(batch.n_edges, 2, 2))
    marg = JunctionTree().marginals(batch, node, edge).node
    labels = rng.integers(0, 2, size=batch.n_total_nodes)
    data = pmc.CRFData(batch, labels, n_labels=2)
    return pmc.Prediction(marg, marg.argmax(1), "bpe"), data


def test_marginals_grid_image_extent_and_errors():
    pred, data = _grid_prediction(3, 4, seed=0)
    ax = plots.plot_marginals_grid(pred, (3, 4), data, graph=1)
    (image,) = ax.images
    nodes = data.graphs.node_index([1])
    np.testing.assert_array_equal(image.get_array(), pred.marginals[nodes, 1].reshape(3, 4))
    assert image.get_extent() == [-0.5, 3.5, 2.5, -0.5]
    wrong = np.flatnonzero(pred.labels[nodes] != data.labels[nodes])
    (crosses,) = ax.collections
    np.testing.assert_array_equal(crosses.get_offsets(), np.column_stack([wrong % 4, wrong // 4]))
    assert ax.get_xlabel().startswith(f"x: {wrong.size} of 12")
    ax0 = plots.plot_marginals_grid(pred, (3, 4), data, graph=0, label=0, show_errors=False)
    np.testing.assert_array_equal(ax0.images[0].get_array(), pred.marginals[:12, 0].reshape(3, 4))


def test_marginals_grid_bad_input():
    pred, data = _grid_prediction(3, 4, seed=1)
    with pytest.raises(ValueError, match="shape 4x4 has 16 nodes"):
        plots.plot_marginals_grid(pred, (4, 4), data)
    with pytest.raises(ValueError, match="label 2 out of range"):
        plots.plot_marginals_grid(pred, (3, 4), data, label=2)
    with pytest.raises(ValueError, match="graph 5 out of range"):
        plots.plot_marginals_grid(pred, (3, 4), data, graph=5)
    with pytest.raises(ValueError, match="prediction has 24 nodes but the graphs have 12"):
        plots.plot_marginals_grid(pred, (3, 4), pmc.GraphBatch.grid(3, 4))


def test_posterior_marginals_refuses_bad_input_by_name(fits):
    ep = fits["ep"]
    with pytest.raises(TypeError, match="results must be a dict of name -> fitted DataTree; got list"):
        plots.plot_posterior_marginals([ep])
    with pytest.raises(ValueError, match="plot_posterior_marginals needs at least one result"):
        plots.plot_posterior_marginals({})
    with pytest.raises(TypeError, match=r"results\['ep'\] must be a fitted DataTree .*got ndarray"):
        plots.plot_posterior_marginals({"ep": posterior_matrix(ep)})
    with pytest.raises(ValueError, match=r"results\['ep'\] has no 'posterior' group"):
        plots.plot_posterior_marginals({"ep": ep.copy().drop_nodes("posterior")})
    with pytest.raises(ValueError, match="max_panels must be an integer >= 1; got 0"):
        plots.plot_posterior_marginals({"ep": ep}, max_panels=0)
    with pytest.raises(ValueError, match="bins must be an integer >= 1; got 2.5"):
        plots.plot_posterior_marginals({"ep": ep}, bins=2.5)
    with pytest.raises(ValueError, match="ncols must be an integer >= 1; got 0"):
        plots.plot_posterior_marginals({"ep": ep}, ncols=0)
    with pytest.raises(TypeError,
                       match=r"var_names must be a list of names; got the str 'w' \(write \['w'\]\)"):
        plots.plot_posterior_marginals({"ep": ep}, var_names="w")
    fig = plt.figure()
    with pytest.raises(TypeError, match="ax must be matplotlib Axes or an array of them; got Figure"):
        plots.plot_posterior_marginals({"ep": ep}, max_panels=1, ax=fig)


def test_compare_and_convergence_refuse_bad_input_by_name(fits):
    table = pd.DataFrame({"cvm": [0.0, 0.2]}, index=pd.Index(["nuts", "ep"], name="method"))
    with pytest.raises(TypeError, match="columns must be a list of names; got the str 'cvm'"):
        plots.plot_compare(table, columns="cvm")
    with pytest.raises(TypeError, match="result must be a fitter's DataTree or a diagnostics "
                                        "Dataset; got dict"):
        plots.plot_convergence({"ep": fits["ep"]})
    with pytest.raises(TypeError, match="var_names must be a list of names; got the str 'skipped'"):
        plots.plot_convergence(fits["ep"], var_names="skipped")


def test_marginals_plots_refuse_bad_input_by_name(fits):
    pred, data = _grid_prediction(3, 4, seed=2)
    with pytest.raises(TypeError, match="prediction must be a pmc.Prediction .*got DataTree"):
        plots.plot_marginals_chain(fits["map"], data)
    with pytest.raises(TypeError, match="prediction must be a pmc.Prediction .*got DataTree"):
        plots.plot_marginals_grid(fits["map"], (3, 4), data)
    _, two = plt.subplots(1, 2)
    with pytest.raises(TypeError, match="ax must be one matplotlib Axes .*got ndarray"):
        plots.plot_marginals_chain(pred, data, ax=two)
    with pytest.raises(TypeError, match="ax must be one matplotlib Axes .*got ndarray"):
        plots.plot_marginals_grid(pred, (3, 4), data, ax=two)
    for shape in (12, (3,), "34"):
        with pytest.raises(TypeError, match=r"shape must be a \(rows, cols\) pair"):
            plots.plot_marginals_grid(pred, shape, data)
    with pytest.raises(ValueError, match=r"shape\[0\] \(rows\) must be an integer >= 1; got 0"):
        plots.plot_marginals_grid(pred, (0, 4), data)
    with pytest.raises(ValueError, match=r"shape\[1\] \(cols\) must be an integer >= 1; got 4.5"):
        plots.plot_marginals_grid(pred, (3, 4.5), data)
    with pytest.raises(ValueError, match="label must be an integer >= 0; got '1'"):
        plots.plot_marginals_grid(pred, (3, 4), data, label="1")
    with pytest.raises(ValueError, match="graph must be an integer >= 0; got 0.5"):
        plots.plot_marginals_grid(pred, (3, 4), data, graph=0.5)


def _reliability():
    marg = np.array([[0.95, 0.05], [0.9, 0.1], [0.6, 0.4], [0.3, 0.7]])
    return pmc.metrics.reliability_curve(marg, np.array([0, 1, 0, 1]), 5)


def test_reliability_lines_hold_the_used_bins():
    curve = _reliability()
    ax = plots.plot_reliability({"a": curve}, title="t")
    diagonal, line = ax.lines
    used = curve.count > 0
    np.testing.assert_array_equal(line.get_xdata(), curve.confidence[used])
    np.testing.assert_array_equal(line.get_ydata(), curve.accuracy[used])
    assert line.get_label() == f"a (ECE {curve.ece:.3f})" and ax.get_title() == "t"
    _, mine = plt.subplots()
    assert plots.plot_reliability({"a": curve}, ax=mine) is mine


def test_reliability_refuses_bad_input_by_name():
    pred, _ = _grid_prediction(3, 4, seed=3)
    with pytest.raises(TypeError, match=r"curves\['nuts'\] must be a pymc_crf.metrics.Reliability "
                                        r"\(from pmc.metrics.reliability_curve\); got Prediction"):
        plots.plot_reliability({"nuts": pred})
    with pytest.raises(TypeError, match="curves must be a dict of name -> Reliability; got list"):
        plots.plot_reliability([_reliability()])
    with pytest.raises(ValueError, match="curves is empty"):
        plots.plot_reliability({})
    with pytest.raises(TypeError, match="title must be a str; got int"):
        plots.plot_reliability({"a": _reliability()}, title=3)
    _, two = plt.subplots(1, 2)
    with pytest.raises(TypeError, match="ax must be one matplotlib Axes .*got ndarray"):
        plots.plot_reliability({"a": _reliability()}, ax=two)


def test_calibration_pava_panels(fits):
    """``plot_calibration_pava``: arviz-plots' PAV calibration of the posterior predictive
    labellings, one panel per label against the others (one panel for two labels), each with
    its PAV curve and the diagonal; unlabelled data is refused."""
    test = fits["test"]
    pc = plots.plot_calibration_pava(fits["ep"], test, draws=50)
    panels = len(pc.viz["title"].to_dataset().data_vars)
    assert panels == (1 if test.n_labels == 2 else test.n_labels)
    fig = plt.gcf()
    assert all(len(ax.get_lines()) >= 2 for ax in fig.axes[:panels])
    unlabelled = pmc.CRFData(test.graphs, None, edge_features=test.edge_features,
                             n_labels=test.n_labels)
    with pytest.raises(ValueError, match="needs labelled data"):
        plots.plot_calibration_pava(fits["ep"], unlabelled)
