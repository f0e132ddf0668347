"""Nothing silently wrong (issue 36): inputs changed after the model is built are checked where
the logp runs, unclear cases end in one line naming the problem, and refusals name the method
and one that can."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_crf as pmc
from pymc_crf.model.spec import extract_crf

# Every case runs in one child process, so a segmentation fault (the MRF's label columns were
# indexed without bounds checks) fails this test instead of killing pytest; the child prints
# each case's exception type and message as JSON. It compiles the logp as the test process does
# (helpers/linker.py): the numba kernels, where the crash was, in the NUMBA pass.
_SET_DATA_CASES = textwrap.dedent('''
    import json, sys, warnings
    sys.path.insert(0, TESTS_DIR)
    from helpers.linker import use_test_linker
    use_test_linker()
    import numpy as np, pymc as pm, pymc_crf as pmc
    warnings.simplefilter("ignore")
    out = {}

    def cases(model, good, bad, mode=None):
        """Compile the logp once; each bad update in turn, then the good data back."""
        f = model.compile_logp(mode=mode)
        point = model.initial_point()
        f(point)
        for name, updates in bad.items():
            pm.set_data(updates, model=model)
            try:
                out[name] = ["ok", float(f(point))]
            except Exception as err:  # reported to the parent, which checks the type
                out[name] = [type(err).__name__, str(err).splitlines()[0]]
            print(json.dumps({name: out[name]}), flush=True)
            pm.set_data(good, model=model)

    d = pmc.datasets.welling_parise_grid(3, 3, n_samples=20, seed=0)

    def mrf(node_weights):
        with pm.Model() as m:
            y = pm.Data("y", d.samples)
            b = node_weights()
            w = pm.Normal("w", 0, 1)
            pmc.MRF("x", graphs=d.graphs, node_weights=b, edge_weights=w,
                    parameterization="ising", observed=y)
        return m

    # the issue's reproducer: free node weights, labels one column short of the graph
    cases(mrf(lambda: pm.Normal("b", 0, 1, shape=9)), {"y": d.samples}, {
        "mrf_one_column_fewer": {"y": d.samples[:, :8]},
        "mrf_one_column_more": {"y": np.concatenate([d.samples, d.samples[:, :1]], 1)},
        "mrf_fewer_rows": {"y": d.samples[:5]}})
    cases(mrf(lambda: pm.Data("b", np.zeros(9))), {"b": np.zeros(9)}, {
        "mrf_node_weights_short": {"b": np.zeros(8)}}, mode="FAST_COMPILE")

    X = np.random.default_rng(0).normal(size=(7, 2))
    batch = pmc.GraphBatch.chains([2, 3, 2])

    def hcrf():
        with pm.Model() as m:
            y = pm.Data("y", np.array([0, 1, 0]))
            tx = pm.Normal("tx", 0, 1, shape=(2, 2))
            ty = pm.Normal("ty", 0, 1, shape=(2, 2))
            te = pm.Normal("te", 0, 1, shape=(2, 2, 2))
            pmc.HCRF("c", graphs=batch, node_features=X, theta_x=tx, theta_y=ty, theta_e=te,
                     observed=y)
        return m

    cases(hcrf(), {"y": np.array([0, 1, 0])}, {
        "hcrf_one_label": {"y": np.array([1])},
        "hcrf_one_label_more": {"y": np.array([0, 1, 0, 1])}},
        mode="FAST_COMPILE")  # a broadcast, not a crash: PyTensor's Python linker shows it
''')


@pytest.fixture(scope="module")
def set_data_cases():
    code = f"TESTS_DIR = {str(Path(__file__).parent)!r}\n" + _SET_DATA_CASES
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (f"the child process ended with {proc.returncode} "
                                  f"(-11: segmentation fault):\n{proc.stderr[-3000:]}")
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            out.update(json.loads(line))
    return out


@pytest.mark.parametrize("case", ["mrf_one_column_fewer", "mrf_one_column_more"])
def test_mrf_labels_of_another_width_are_refused_by_name(set_data_cases, case):
    kind, message = set_data_cases[case]
    assert kind == "ValueError", (kind, message)
    assert "MRF labels (observed) must be an (n_samples, n_nodes) = (N, 9) matrix" in message


def test_mrf_data_weights_of_another_shape_are_refused_by_name(set_data_cases):
    kind, message = set_data_cases["mrf_node_weights_short"]
    assert kind == "ValueError", (kind, message)
    assert "MRF node_weights must have shape (9,) for parameterization='ising'" in message


def test_mrf_rows_may_change(set_data_cases):
    kind, value = set_data_cases["mrf_fewer_rows"]
    assert kind == "ok" and np.isfinite(value)


@pytest.mark.parametrize("case", ["hcrf_one_label", "hcrf_one_label_more"])
def test_hcrf_labels_of_another_length_are_refused_by_name(set_data_cases, case):
    """One label would broadcast against all three graphs: a wrong likelihood, silently."""
    kind, message = set_data_cases[case]
    assert kind == "ValueError", (kind, message)
    assert "HCRF labels (observed) must be one class per graph, shape (3,)" in message


BATCH = pmc.GraphBatch.chains([3, 2])
LABELS = np.array([[0, 1, 1], [1, 0, -1]])


def _one_line(excinfo, *parts):
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    for part in parts:
        assert part in msg, msg


def _crf_model(labels=LABELS, weights=None):
    with pm.Model() as model:
        w = pm.Normal("w", 0.0, 1.0, shape=(2, 2)) if weights is None else weights
        pmc.CRF("t", graphs=BATCH, edge_weights=w, observed=labels)
    return model


@pytest.mark.parametrize("method", ["map", "nuts", "ep"])
def test_fit_refuses_a_model_without_free_variables(method):
    """Refused by name, not with an IndexError inside PyMC's backend (map) or a SamplingError
    (nuts)."""
    with pytest.raises(ValueError) as exc:
        pmc.fit(_crf_model(weights=np.zeros((2, 2))), method=method, progressbar=False)
    _one_line(exc, f"pmc.fit(method={method!r})", "has no free variables", "nothing to fit")
    with pm.Model() as empty:
        pass
    with pytest.raises(ValueError) as exc:
        pmc.fit(empty, method=method, progressbar=False)
    _one_line(exc, "the model is empty", "nothing to fit")


def test_predict_refuses_what_is_not_a_result():
    data = pmc.CRFData(BATCH, np.array([0, 1, 1, 1, 0]))
    for bad in (None, {"posterior": 1}):
        with pytest.raises(TypeError) as exc:
            pmc.predict(bad, data)
        _one_line(exc, "result must be a fitted DataTree", type(bad).__name__)


def _mrf_model():
    grid = pmc.GraphBatch.grid(2, 2)
    with pm.Model() as model:
        w = pm.Normal("w", 0.0, 1.0)
        pmc.MRF("x", graphs=grid, edge_weights=w, parameterization="ising",
                observed=np.array([[0, 1, 1, 0], [1, 1, 1, 1]]))
    return model


def test_predict_on_an_mrf_result_says_what_to_use():
    """It advised model=, which then failed naming the internal class MRFRV."""
    model = _mrf_model()
    result = pmc.fit(model, method="map", progressbar=False)
    data = pmc.CRFData(pmc.GraphBatch.chains([3]), np.array([0, 1, 1]))
    for kwargs in ({}, {"model": model}):
        with pytest.raises(ValueError) as exc:
            pmc.predict(result, data, **kwargs)
        _one_line(exc, "this is a pmc.MRF result", "pm.sample_posterior_predictive")
        assert "MRFRV" not in str(exc.value)


def test_refusals_name_the_method_and_one_that_can():
    with pm.Model() as two:
        w = pm.Normal("w", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("t", graphs=BATCH, edge_weights=w, observed=LABELS)
        pmc.CRF("u", graphs=BATCH, edge_weights=w, observed=LABELS)
    with pytest.raises(ValueError) as exc:
        pmc.fit(two, method="ep", progressbar=False)
    _one_line(exc, "pmc.fit(method='ep') needs a model with exactly one pmc.CRF likelihood",
              "this model has 2 (['t', 'u'])", "method='map' and 'nuts' take any PyMC model")
    assert "fitters take" not in str(exc.value)
    # and map, named there, does fit it
    assert "w" in pmc.fit(two, method="map", progressbar=False)["posterior"]
    with pytest.raises(ValueError) as exc:
        pmc.fit(_mrf_model(), method="ep", progressbar=False)
    _one_line(exc, "method='ep' fits the weights of a pmc.CRF", "this model observes ['x (MRF)']",
              "for MRFs 'bethe_laplace'")
    with pytest.raises(ValueError) as exc:
        pmc.fit(_crf_model(), method="bp_hcrf_vi", progressbar=False)
    _one_line(exc, "pmc.fit(method='bp_hcrf_vi') needs a model with exactly one observed pmc.HCRF",
              "this model has 0", "method='map' and 'nuts' take any PyMC model")
    assert "this fitter" not in str(exc.value)


def test_refusal_outside_a_fit_does_not_claim_a_method():
    with pytest.raises(ValueError) as exc:
        extract_crf(_mrf_model())
    _one_line(exc, "this function needs a model with an observed pmc.CRF likelihood")
    assert "pmc.fit" not in str(exc.value)


def test_predict_from_a_model_with_two_crfs_does_not_suggest_refitting():
    """Predicting needs the one CRF whose graphs the new data are; with two the refusal names
    them and does not point to fitting methods (the fit itself succeeded)."""
    with pm.Model() as two:
        w = pm.Normal("w", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("t", graphs=BATCH, edge_weights=w, observed=LABELS)
        pmc.CRF("u", graphs=BATCH, edge_weights=w, observed=LABELS)
    result = pmc.fit(two, method="map", progressbar=False)
    with pytest.raises(ValueError) as exc:
        pmc.predict(result, pmc.CRFData(BATCH, np.array([0, 1, 1, 1, 0])), method="bpe",
                    model=two)
    _one_line(exc, "needs a model with exactly one pmc.CRF likelihood",
              "this model has 2 (['t', 'u'])")
    assert "pmc.fit" not in str(exc.value) and "any PyMC model" not in str(exc.value)


@pytest.mark.parametrize("value", [np.inf, -np.inf])
def test_infinite_labels_are_named_as_such(value):
    """NaN marks a missing label, so the refusal of inf names inf, not "NaN or inf"."""
    flat = np.array([0, 1, value, 1, 0])
    with pytest.raises(ValueError) as exc:
        pmc.pad_labels(BATCH, flat, 2, missing=True)
    _one_line(exc, f"labels contain {value} at node 2 of graph 0", "NaN, -1 or a masked entry")
    assert "NaN or inf" not in str(exc.value)
    with pytest.raises(ValueError) as exc:
        _crf_model(labels=flat)
    _one_line(exc, f"labels contain {value} at node 2 of graph 0")
    # labels swapped in through pm.Data: refused at fit time, named likewise
    with pm.Model() as model:
        y = pm.Data("y", LABELS.astype(float))
        w = pm.Normal("w", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("t", graphs=BATCH, edge_weights=w, observed=y)
    bad = LABELS.astype(float)
    bad[0, 2] = value
    pm.set_data({"y": bad}, model=model)
    with pytest.raises(ValueError) as exc:
        pmc.fit(model, method="map", progressbar=False)
    _one_line(exc, "observed labels of 't'", f"labels contain {value} at node 2 of graph 0")
    with pm.Model(), pytest.raises(ValueError) as exc:
        w = pm.Normal("w", 0.0, 1.0)
        pmc.MRF("x", graphs=pmc.GraphBatch.chains([3]), edge_weights=w,
                parameterization="ising", observed=np.array([[0.0, value, 1.0]]))
    _one_line(exc, f"MRF labels contain {value} at row 0, node 1")


def test_mrf_missing_label_marker_points_to_the_crf():
    with pm.Model(), pytest.raises(ValueError) as exc:
        w = pm.Normal("w", 0.0, 1.0)
        pmc.MRF("x", graphs=pmc.GraphBatch.chains([3]), edge_weights=w,
                parameterization="ising", observed=np.array([[0, -1, 1]]))
    _one_line(exc, "label -1 at row 0, node 1 is outside 0..1",
              "missing labels are supported by pmc.CRF")


@pytest.mark.parametrize("parameterization", ["ising", "table"])
def test_mrf_spin_labels_are_named_as_spins_not_missing_labels(parameterization):
    """Labels of only -1 and +1 are spins, not labels with a missing marker: the message says
    how to turn them into label indices and does not point to pmc.CRF for missing labels."""
    spins = np.array([[1, -1, 1], [-1, -1, 1]])
    with pm.Model(), pytest.raises(ValueError) as exc:
        w = pm.Normal("w", 0.0, 1.0, shape=() if parameterization == "ising" else (2, 2))
        pmc.MRF("x", graphs=pmc.GraphBatch.chains([3]), edge_weights=w,
                parameterization=parameterization, observed=spins)
    _one_line(exc, "label -1 at row 0, node 1 is outside 0..1", "look like spins -1 / +1",
              "label = (s + 1) // 2")
    assert "missing labels" not in str(exc.value)


def _draws_result(model, n_draws):
    """A result of ``n_draws`` prior draws of ``w``, built as every fitter builds its result
    (the per-graph log-likelihood from the engine)."""
    w = np.random.default_rng(0).normal(size=(1, n_draws, 2, 2))
    return pmc.fitters.build_result(model, {"w": w}, "test_draws", {}, 0.0)


def test_loo_refuses_a_one_draw_result():
    """az.loo ends in ArviZ's IndexError on a MAP result."""
    result = pmc.fit(_crf_model(), method="map", progressbar=False)
    with pytest.raises(ValueError) as exc:
        pmc.loo(result)
    _one_line(exc, "pmc.loo needs posterior draws", "'map' result has 1",
              "method='nuts', 'ep' or 'bethe_laplace'", "pmc.compare(results, test=...)")
    with pytest.raises(TypeError) as exc:
        pmc.loo(None)
    _one_line(exc, "result must be a fitted DataTree")


@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")
def test_loo_leaves_out_graphs_without_labels():
    """A graph with every label missing has log-likelihood 0 in every draw (its labels are
    summed out), which az.loo cannot smooth ("All tail values are the same"); its
    leave-one-out term is exactly 0, so pmc.loo's estimate is the other graphs' loo."""
    labels = np.array([[0, 1, 1], [-1, -1, -1], [1, 0, -1]])
    with pm.Model() as model:
        w = pm.Normal("w", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("t", graphs=pmc.GraphBatch.chains([3, 3, 2]), edge_weights=w, observed=labels)
    result = _draws_result(model, 200)
    ll = result["log_likelihood"]["t"].values
    assert (ll[..., 1] == 0).all() and (ll[..., [0, 2]] < 0).all()
    with pytest.warns(UserWarning, match=r"graphs \[1\] .* have no observed label"):
        got = pmc.loo(result, pointwise=True)
    kept = result.copy()
    kept["log_likelihood"] = result["log_likelihood"].to_dataset().isel(t_dim_0=[0, 2])
    want = az.loo(kept, pointwise=True)
    assert got["elpd"] == pytest.approx(want["elpd"])
    assert np.isfinite(got["elpd"])


def _data_crf(mode="FAST_COMPILE"):
    with pm.Model() as model:
        y = pm.Data("y", LABELS.astype(float))
        w = pm.Normal("w", 0.0, 1.0, shape=(2, 2))
        rv = pmc.CRF("t", graphs=BATCH, edge_weights=w, observed=y)
    return model, model.compile_logp(vars=[rv], sum=False, mode=mode)


def test_nan_in_data_labels_is_missing_in_the_compiled_logp_too():
    """Fit time read NaN through pm.Data as missing, but the compiled logp (NUTS) saw PyMC's
    int64 cast of NaN and refused it: found by the fuzz suite."""
    model, f = _data_crf()
    point = {"w": np.array([[0.3, -0.2], [0.1, 0.4]])}
    gap = LABELS.astype(float)
    gap[0, 2] = np.nan
    pm.set_data({"y": gap}, model=model)
    [got] = f(point)
    minus_one = LABELS.copy()
    minus_one[0, 2] = -1
    pm.set_data({"y": minus_one.astype(float)}, model=model)
    [want] = f(point)
    np.testing.assert_allclose(got, want, rtol=0, atol=0)
    assert extract_crf(model).labels.tolist() == [0, 1, -1, 1, 0]


@pytest.mark.parametrize("kind", ["CRF", "MRF", "HCRF"])
def test_fractional_data_labels_are_refused_where_the_logp_runs(kind):
    """PyMC's int64 cast truncated 0.5 to 0: a likelihood of other labels, silently."""
    if kind == "CRF":
        model, f = _data_crf()
        bad = LABELS.astype(float)
        bad[0, 1] = 0.5
        point = {"w": np.zeros((2, 2))}
    elif kind == "MRF":
        with pm.Model() as model:
            y = pm.Data("y", np.zeros((2, 3)))
            w = pm.Normal("w", 0.0, 1.0)
            rv = pmc.MRF("x", graphs=pmc.GraphBatch.chains([3]), edge_weights=w,
                         parameterization="ising", observed=y)
        f = model.compile_logp(vars=[rv], sum=False, mode="FAST_COMPILE")
        bad = np.array([[0, 0.5, 1], [1, 1, 0]])
        point = {"w": 0.0}
    else:
        with pm.Model() as model:
            y = pm.Data("y", np.array([0.0, 1.0]))
            tx = pm.Normal("tx", 0, 1, shape=(1, 2))
            ty = pm.Normal("ty", 0, 1, shape=(2, 2))
            te = pm.Normal("te", 0, 1, shape=(2, 2, 2))
            rv = pmc.HCRF("c", graphs=pmc.GraphBatch.chains([2, 2]), node_features=np.ones((4, 1)),
                          theta_x=tx, theta_y=ty, theta_e=te, observed=y)
        f = model.compile_logp(vars=[rv], sum=False, mode="FAST_COMPILE")
        bad = np.array([0.5, 1.0])
        point = model.initial_point()
    pm.set_data({"y": bad}, model=model)
    with pytest.raises(ValueError) as exc:
        f(point)
    _one_line(exc, f"{kind} labels must be whole numbers (class indices)")
    if kind == "MRF":  # and where fitters read the labels, which evaluated the cast first
        with pytest.raises(ValueError) as exc:
            pmc.fitters.extract_mrf(model)
        _one_line(exc, "observed labels of 'x'", "whole numbers")


@pytest.mark.parametrize(("dtype", "sparse"), [(complex, False), (complex, True), (str, False)])
def test_features_of_other_dtypes_are_refused(dtype, sparse):
    """Complex features lost their imaginary part with a warning only: found by the fuzz
    suite (scipy.sparse holds no strings, so strings are dense only)."""
    import scipy.sparse

    X = (np.arange(10.0).reshape(5, 2) + 1j).astype(dtype)
    X = scipy.sparse.csr_matrix(X) if sparse else X
    with pm.Model(), pytest.raises(ValueError) as exc:
        W = pm.Normal("W", 0, 1, shape=(2, 2))
        pmc.CRF("t", graphs=BATCH, node_features=X, node_weights=W, observed=LABELS)
    _one_line(exc, "node features must be real numbers", "got dtype")
    with pytest.raises(ValueError) as exc:
        pmc.CRFData(BATCH, None, node_features=X)
    _one_line(exc, "node features must be real numbers")


@pytest.mark.parametrize("update,name,shape", [({"W": np.zeros((3, 2))}, "node_weights", "(2, 2)"),
                                               ({"T": np.zeros((3, 3))}, "edge_weights", "(2, 2)")])
def test_crf_data_weights_of_another_shape_are_refused_by_name(update, name, shape):
    """They gave PyTensor's "incompatible array sizes for np.dot" or the engine's table error."""
    X = np.random.default_rng(0).normal(size=(5, 2))
    with pm.Model() as model:
        W = pm.Data("W", np.zeros((2, 2)))
        T = pm.Data("T", np.zeros((2, 2)))
        s = pm.Normal("s", 0, 1)
        pmc.CRF("t", graphs=BATCH, node_features=X, node_weights=W * s, edge_weights=T + s,
                observed=LABELS)
    f = model.compile_logp(mode="FAST_COMPILE")
    assert np.isfinite(f({"s": 0.1}))
    pm.set_data(update, model=model)
    with pytest.raises(ValueError) as exc:
        f({"s": 0.1})
    assert f"CRF {name} must have shape {shape}" in str(exc.value).splitlines()[0]
