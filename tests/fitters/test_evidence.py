"""Evidence estimates (Parise & Welling 2006) against the marginal likelihood by quadrature on
2-parameter models, and their plumbing (fit group, compare column, errors)."""

import numpy as np
import pymc as pm
import pytest
from scipy.integrate import simpson

import pymc_crf as pmc
from pymc_crf.fitters.bethe_laplace import weight_problem
from pymc_crf.fitters.bethe_laplace.batched import BatchedLikelihood
from pymc_crf.fitters.evidence import LogEvidence, log_marginal_likelihood


def _mrf_model():
    X = np.random.default_rng(0).integers(0, 2, size=(30, 3))
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0)
        w = pm.Normal("w", 0.0, 1.0)
        pmc.MRF("x", graphs=pmc.GraphBatch.chains([3]), node_weights=b, edge_weights=w,
                parameterization="ising", observed=X)
    return m


def _crf_model():
    rng = np.random.default_rng(1)
    batch = pmc.GraphBatch.chains([3] * 8)
    X = rng.normal(size=(batch.n_total_nodes, 1))
    y = (rng.uniform(size=batch.n_total_nodes) < 1 / (1 + np.exp(-1.5 * X[:, 0]))).astype(int)
    with pm.Model() as m:
        W = pm.Normal("W", 0.0, 1.0, shape=(1, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, observed=y)
    return m


def _quadrature(model, half_width=5.0, n=121):
    """log int p(D|w) p(w) dw over a 2-d box by Simpson's rule (the posterior is far inside)."""
    p = weight_problem(model, "quadrature")
    lik = p.make_likelihood()
    a = np.linspace(-half_width, half_width, n)
    A, B = np.meshgrid(a, a, indexing="ij")
    W = np.stack([A.ravel(), B.ravel()], axis=1)
    ll = BatchedLikelihood(lik, W.shape[0])(W)[0]
    lp = ll + np.array([p.prior(w)[0] for w in W])
    top = lp.max()
    f = np.exp(lp - top).reshape(n, n)
    return float(np.log(simpson(simpson(f, x=a, axis=1), x=a)) + top)


@pytest.mark.parametrize("make", [
    _mrf_model,
    # the CRF's batched feature products and AIS compile for ~30 s with empty caches: slow
    pytest.param(_crf_model, marks=pytest.mark.slow)], ids=["mrf", "crf"])
def test_every_method_against_quadrature(make):
    m = make()
    truth = _quadrature(m)
    est = {meth: log_marginal_likelihood(m, meth, random_seed=0, n_temps=400, n_runs=16)
           for meth in ("bethe_laplace", "laplace_exact", "bic", "map", "ais")}
    assert all(isinstance(v, LogEvidence) for v in est.values())
    err = {k: abs(float(v) - truth) for k, v in est.items()}
    # Laplace with all O(1) terms: O(1/N) off; on a tree the Bethe quantities are exact
    assert err["laplace_exact"] < 0.05, err
    assert abs(est["bethe_laplace"] - est["laplace_exact"]) < 1e-6
    # the O(1) terms matter: BIC and the MAP score are far off at this N
    assert err["bic"] > 10 * err["laplace_exact"] and err["map"] > 10 * err["laplace_exact"], err
    # AIS: unbiased in the weights, within its own Monte Carlo error
    assert 0 < est["ais"].std_error < 0.2
    assert err["ais"] < 4 * est["ais"].std_error + 0.02, (err, est["ais"].std_error)


def test_the_evidence_attr_and_compare_column():
    m = _mrf_model()
    r = pmc.fit(m, method="bethe_laplace", draws=50, random_seed=0)
    ev = log_marginal_likelihood(m, "bethe_laplace", map="exact")
    assert r.attrs["log_marginal_likelihood"] == pytest.approx(float(ev), abs=1e-8)
    # stored once: not repeated in the fit group or as a per-draw statistic
    assert "log_marginal_likelihood" not in r["fit"] and "sample_stats" not in r.children
    table = pmc.compare({"bl": r})
    assert table.loc["bl", "log_marginal_likelihood"] == pytest.approx(float(ev), abs=1e-8)


def test_a_search_stopped_by_maxiter_warns_and_is_recorded():
    # the Laplace evidence at a point short of the mode is a different number: say so
    m = _crf_model()
    for meth in ("laplace_exact", "bethe_laplace", "map"):
        with pytest.warns(pmc.ConvergenceWarning, match="maxiter=1 .*Increase maxiter"):
            short = log_marginal_likelihood(m, meth, maxiter=1, progressbar=False)
        assert short.details["map_converged"] is False
        full = log_marginal_likelihood(m, meth, progressbar=False)
        assert full.details["map_converged"] is True
        assert abs(float(short) - float(full)) > 1e-3
    with pytest.warns(pmc.ConvergenceWarning, match="pmc.fit\\(method='map'\\).*maxiter=2") as rec:
        pmc.fit(m, method="map", maxiter=2, progressbar=False)
    assert rec[0].filename == __file__  # the user's line, not the package's
    with pytest.warns(pmc.ConvergenceWarning, match="Laplace mean"):
        pmc.fit(m, method="bethe_laplace", maxiter=1, draws=10, progressbar=False)


def test_bad_evidence_options():
    m = _mrf_model()
    with pytest.raises(ValueError, match="unknown evidence method"):
        log_marginal_likelihood(m, "harmonic_mean")
    with pytest.raises(ValueError, match="n_runs"):
        log_marginal_likelihood(m, "ais", n_runs=1)
    with pytest.raises(ValueError, match="engine"):
        log_marginal_likelihood(m, "ais", engine="gibbs")
    # options are checked, also where they do not apply (map='bogus' ran as 'bp')
    with pytest.raises(ValueError, match=r"map must be one of \('exact', 'bp'\); got 'bogus'"):
        log_marginal_likelihood(m, "map", map="bogus")
    with pytest.raises(ValueError, match="map= applies to methods 'bethe_laplace' and 'map', "
                                         "not 'laplace_exact'"):
        log_marginal_likelihood(m, "laplace_exact", map="bp")
    with pytest.raises(ValueError, match="engine= applies to method 'ais', not 'bic'"):
        log_marginal_likelihood(m, "bic", engine="bp")
    # step_size=0 ran as prior importance sampling with an acceptance rate of 1
    for bad in (0.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="step_size must be a number > 0 and finite"):
            log_marginal_likelihood(m, "ais", step_size=bad, n_temps=3, progressbar=False)
    with pytest.raises(ValueError, match="maxiter must be an integer >= 1; got -1"):
        log_marginal_likelihood(m, "laplace_exact", maxiter=-1)
    with pytest.raises(ValueError, match="gtol must be a number >= 0 and finite; got nan"):
        log_marginal_likelihood(m, "bethe_laplace", gtol=np.nan)


def test_invalid_normal_priors_are_refused_by_name():
    """A Normal prior with sigma <= 0, inf or a non-finite mu (PyMC's logp is -inf or NaN): the
    weight-space fitters refused it with a wrong cause, returned NaN, or (AIS) used N(0, 1)."""
    X = np.random.default_rng(0).integers(0, 2, size=(30, 3))
    for mu, sigma in ((0.0, -1.0), (0.0, 0.0), (0.0, np.inf), (np.nan, 1.0)):
        with pm.Model() as m:
            b = pm.Normal("b", 0.0, 1.0)
            w = pm.Normal("w", mu, sigma)
            pmc.MRF("x", graphs=pmc.GraphBatch.chains([3]), node_weights=b, edge_weights=w,
                    parameterization="ising", observed=X)
        for method in ("laplace_exact", "ais"):
            with pytest.raises(ValueError, match="'w': a Normal prior needs a finite mu and a "
                                                 "finite sigma > 0; entry 0 has mu="):
                log_marginal_likelihood(m, method, progressbar=False)
        with pytest.raises(ValueError, match="'w': a Normal prior needs"):
            pmc.fit(m, method="bethe_laplace", progressbar=False)


def test_exact_methods_on_a_too_wide_graph_name_what_to_use_instead():
    X = np.random.default_rng(0).integers(0, 2, size=(5, 144))
    with pm.Model() as m:
        b = pm.Normal("b", 0.0, 1.0)
        w = pm.Normal("w", 0.0, 0.3)
        pmc.MRF("x", graphs=pmc.GraphBatch.grid(12, 12), node_weights=b, edge_weights=w,
                parameterization="ising", observed=X)
    hints = {"laplace_exact": "use method='bethe_laplace' \\(the Bethe approximation\\)",
             "bic": "use method='bethe_laplace' or method='ais' with engine='bp'",
             "map": "use map='bp' or method='bethe_laplace'",
             "ais": "use engine='bp' \\(AIS on the Bethe likelihood\\) or "
                    "method='bethe_laplace'"}
    for method, hint in hints.items():
        with pytest.raises(ValueError, match=f"exact inference is not possible.*; {hint}$"):
            log_marginal_likelihood(m, method, progressbar=False)


def test_log_evidence_copies_and_pickles():
    import copy
    import pickle

    e = LogEvidence(-12.5, "ais", 0.1, 2.0, {"engine": "exact"})
    for twin in (copy.copy(e), copy.deepcopy(e), pickle.loads(pickle.dumps(e))):
        assert twin == -12.5 and twin.method == "ais" and twin.std_error == 0.1
        assert twin.wall_time == 2.0 and twin.details == {"engine": "exact"}


@pytest.mark.slow
def test_fig3_shape_bp_lr_much_closer_to_ais_than_bic_at_small_n():
    """``pymc-crf reproduce parise-welling-fig3`` on two data sets at N = 30 and 100: BP-LR is
    more than 10x closer to AIS than BIC-ML (Parise & Welling 2006 fig. 3: about 100x)."""
    from pymc_crf.reproduce.model_scoring import run_trial

    rows = [[run_trial({"n": n, "d": 0.5 / 4, "n_samples": 100, "n_temps": 1000,
                        "n_runs": 10}, k) for k in range(2)] for n in (30, 100)]
    bp_lr = np.array([np.mean([r["BP-LR"] for r in rs]) for rs in rows])
    bic = np.array([np.mean([r["BIC-ML"] for r in rs]) for rs in rows])
    assert np.all(bic > 10 * bp_lr), (bic, bp_lr)


def test_nested_sequence_runs_through_the_true_structure():
    """Parise & Welling 2006 fig. 2's model sequences: nested, one edge more per step, the true
    structure at position |E*|, the complete graph last, the same sequence for the same seed."""
    from pymc_crf.reproduce.model_scoring import nested_sequence

    true = np.array([[0, 3], [1, 2], [2, 4]])
    seq = nested_sequence(true, 5, seed=7)
    sets = [{tuple(e) for e in m.tolist()} for m in seq]
    assert [len(s) for s in sets] == list(range(1, 11))
    assert all(a < b for a, b in zip(sets, sets[1:], strict=False))
    assert sets[2] == {(0, 3), (1, 2), (2, 4)}
    assert sets[-1] == {(i, j) for i in range(5) for j in range(i + 1, 5)}
    again = nested_sequence(true, 5, seed=7)
    assert all(np.array_equal(a, b) for a, b in zip(seq, again, strict=True))
    other = nested_sequence(true, 5, seed=8)
    assert any(not np.array_equal(a, b) for a, b in zip(seq, other, strict=True))


def test_fig2_trial_scores_a_model_of_the_sequence():
    """A fig. 2 trial scores the k-edge model of its data set's sequence: the signed and absolute
    differences agree, and the model with more edges than the true one is a different model."""
    from pymc_crf.reproduce.model_scoring import METHODS, run_trial

    base = {"n": 50, "d": 0.5 / 4, "n_samples": 50, "n_temps": 200, "n_runs": 2}
    r1 = run_trial({**base, "edges": 1}, 0)
    r10 = run_trial({**base, "edges": 10}, 0)
    for m in METHODS:
        assert r1[m] == abs(r1[f"{m} - AIS"])
    assert r1["true edges"] == r10["true edges"] >= 1
    # BIC's penalty grows with the number of weights: the complete graph is penalised more
    assert r10["BIC-ML - AIS"] < r1["BIC-ML - AIS"]


def test_ais_on_a_graph_without_edges_matches_quadrature():
    """Independent 0/1 units (no edges): the evidence factorises into one 1-D integral per node,
    ``int Bern(x_i | sigmoid(b)) N(b | 0, 1) db``, which quadrature gives to 1e-10; AIS (and the
    batched likelihood it runs on, with zero edges) lies within 4 of its standard errors."""
    from scipy import integrate

    from pymc_crf.graphs.batch import GraphBatch

    data = pmc.datasets.parise_welling_random_structure(d=0.125, n_samples=30, seed=0)
    graphs = GraphBatch.from_edges([np.zeros((0, 2), np.int64)], [5])
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=5)
        pmc.MRF("x", graphs=graphs, node_weights=b, parameterization="boltzmann",
                observed=data.samples)
    exact = 0.0
    n = data.samples.shape[0]
    for k in data.samples.sum(axis=0):
        def f(t, k=k):
            return np.exp(k * t - n * np.logaddexp(0.0, t) - 0.5 * t * t) / np.sqrt(2 * np.pi)
        exact += np.log(integrate.quad(f, -12, 12, epsabs=0, epsrel=1e-12, limit=200)[0])
    ais = pmc.log_marginal_likelihood(model, "ais", n_temps=1000, n_runs=10, random_seed=1,
                                      progressbar=False)
    assert abs(float(ais) - exact) < 4 * ais.std_error, (float(ais), ais.std_error, exact)
    assert ais.std_error < 0.3
