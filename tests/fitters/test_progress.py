"""Progress bars of the fitters: PyMC's backend, silenced by ``progressbar=False``."""

import warnings

import numpy as np
import pytest
from pymc.progress_bar.progress import NullSimpleProgress

import pymc_crf as pmc
from pymc_crf.fitters import progress
from pymc_crf.fitters.progress import fit_progress, track


class _Recorder(NullSimpleProgress):
    """Stands in for PyMC's backend; records what the fitter asks it to draw."""

    def __init__(self, log):
        super().__init__()
        self.log = log

    def add_task(self, description, completed, total):
        self.log.append({"description": description, "total": total, "advanced": 0})
        return len(self.log) - 1

    def advance(self, task_id, advance=1):
        self.log[task_id]["advanced"] += advance


@pytest.fixture
def capbars(monkeypatch, capsys):
    """capsys that also sees PyMC's bars (rich binds ``sys.stderr`` when it is imported)."""
    import sys

    from pymc.progress_bar import rich_progress

    class CurrentStderr:  # the sys.stderr of the moment of writing: capsys swaps it per phase
        def __getattr__(self, name):
            return getattr(sys.stderr, name)

    monkeypatch.setattr(rich_progress, "stderr", CurrentStderr())
    return capsys


@pytest.fixture
def recorded(monkeypatch):
    """Every bar a fitter opens (only those asked for with progressbar=True)."""
    log = []

    def fake(progressbar=True, progressbar_theme=None):
        return _Recorder(log) if progressbar else NullSimpleProgress()

    monkeypatch.setattr(progress, "create_simple_progress", fake)
    return log


def test_track_counts_every_item_and_stops_early():
    with fit_progress("sweeps", 10, progressbar=False) as bar:
        for _ in range(4):
            bar.advance()
    assert bar.completed == 4 and bar.total == 10
    seen = []
    for i in track(range(100), "early stop", progressbar=False):
        seen.append(i)
        if i == 6:
            break
    assert seen == list(range(7))


def test_rich_bar_advances(capbars):
    with fit_progress("sweeps", 5, progressbar=True) as bar:
        for _ in range(5):
            bar.advance()
    assert bar.completed == 5
    assert "sweeps" in capbars.readouterr().err  # PyMC's bar draws on stderr


def _fits(loop_model):
    """(method, options) of the cheap iterative fitters on the loop model."""
    return [("map", {}), ("ep", {"max_iter": 3, "draws": 5}),
            ("bethe_laplace", {"map": "exact", "draws": 5, "log_likelihood": False})]


@pytest.mark.parametrize("method", ["map", "ep", "bethe_laplace"])
def test_fitters_advance_their_bar(loop_model, recorded, method):
    opts = dict(_fits(loop_model))[method]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = pmc.fit(loop_model, method=method, **opts)
    assert len(recorded) == 1
    bar = recorded[0]
    if method == "ep":
        assert bar["advanced"] == int(res["diagnostics"]["iterations"]) and bar["total"] == 3
    else:
        group = "optimizer_result" if method == "map" else "diagnostics"
        assert bar["advanced"] == int(res[group]["n_iterations"]) > 0


@pytest.mark.parametrize("method", ["map", "ep"])
def test_progressbar_false_prints_nothing(loop_model, capbars, method):
    opts = dict(_fits(loop_model))[method]
    capbars.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pmc.fit(loop_model, method=method, progressbar=False, **opts)
    out = capbars.readouterr()
    assert out.out == "" and out.err == ""


def test_ais_bar_counts_temperatures(loop_model, recorded):
    ev = pmc.log_marginal_likelihood(loop_model, method="ais", n_runs=2, n_temps=4, n_leapfrog=1,
                                     random_seed=0)
    assert np.isfinite(ev)
    ais = [b for b in recorded if b["description"] == "AIS temperatures"]
    assert len(ais) == 1 and ais[0]["advanced"] == ais[0]["total"] == 4


def test_ais_silent(loop_model, capbars):
    capbars.readouterr()
    pmc.log_marginal_likelihood(loop_model, method="ais", n_runs=2, n_temps=4, n_leapfrog=1,
                                random_seed=0, progressbar=False)
    out = capbars.readouterr()
    assert out.out == "" and out.err == ""


def test_vi_bar_counts_iterations(recorded):
    from pymc_crf.datasets import hmm_classes
    from pymc_crf.fitters.beta_process.fitter import sign_split
    from pymc_crf.fitters.beta_process.likelihood import HCRFData
    from pymc_crf.fitters.beta_process.vi import VISettings, init_state, run_vi
    from pymc_crf.inference.chain import ChainEngine

    train, _ = hmm_classes(n_train_per_class=2, n_test_per_class=1, T=10, seed=3)
    data = HCRFData(train.graphs, sign_split(train.node_features), train.labels, 3)
    s = VISettings(truncation=3, rounds=2, max_iter=2, theta_maxiter=3)
    st = run_vi(data, ChainEngine(), s, init_state(data, s, np.random.default_rng(0)),
                progressbar=True)
    iterations = sum(name == "theta" for name, _ in st.trace)
    assert recorded == [{"description": "VI iterations", "total": 2, "advanced": iterations}]


def test_learned_scales_bar_counts_mackay_steps(recorded):
    """A learned-scale Laplace fit shows MacKay's steps (the MAPs inside them have no bars)."""
    import pymc as pm

    rng = np.random.default_rng(0)
    batch = pmc.GraphBatch.chains([3] * 8)
    X = rng.normal(size=(batch.n_total_nodes, 2))
    y = (X[:, 0] > 0).astype(int)
    with pm.Model() as m:
        s = pm.HalfNormal("s", 1.0, shape=2)
        W = pm.Normal("W", 0.0, s[[0, 1]][:, None], shape=(2, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, observed=y)
    res = pmc.fit(m, method="laplace", covariance="diagonal", draws=5, log_likelihood=False)
    bars = [b for b in recorded if b["description"] == "Learned scales: MacKay's steps"]
    # one trace entry for the start and one per iteration the bar counts, and at most one for the
    # iteration that stops the steps (not counted: the bar then closes at 100 %)
    steps = res["diagnostics"].sizes["outer_iteration"]
    assert len(bars) == 1 and bars[0]["total"] == 200
    assert steps - 2 <= bars[0]["advanced"] <= steps - 1 and bars[0]["advanced"] > 0
    pmc.fit(m, method="laplace", covariance="diagonal", draws=5, log_likelihood=False,
            progressbar=False)
    assert len([b for b in recorded if b["description"].startswith("Learned")]) == 1
