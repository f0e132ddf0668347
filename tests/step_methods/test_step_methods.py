"""Random-field step methods (BetheMH, Exchange, LangevinCD): their ingredients against exact
inference, and their integration with pm.sample (chains, compound steps, cores, seeds)."""

import arviz as az
import numpy as np
import pymc as pm
import pytest
from helpers.models import TREE, grid_model, hierarchical_model, mrf_model, tree_model
from pymc.sampling.mcmc import assign_step_methods
from pymc.step_methods.compound import Competence

import pymc_crf as pmc
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference import get_engine
from pymc_crf.inference.select import ApproximateInferenceWarning
from pymc_crf.model.random_field import extract_random_field, random_field_log_likelihood
from pymc_crf.step_methods import BetheMH, Exchange, LangevinCD

MODELS = {"crf": lambda: tree_model(n_graphs=3), "mrf": lambda: mrf_model()}


def _step(cls, model, **kw):
    with model:
        st = cls(**kw)
    st.setup_chain(np.random.default_rng(3), 100, 100)
    return st


# ------------------------------------------------------------------ ingredients vs exact inference
@pytest.mark.parametrize("kind", MODELS)
def test_bethe_log_likelihood_is_exact_on_a_tree(kind, rng):
    m = MODELS[kind]()
    st = _step(BetheMH, m)
    exact = random_field_log_likelihood(extract_random_field(m),
                                        get_engine("junction_tree", st.field.batch))
    for _ in range(3):
        q = rng.normal(size=st.d)
        ll, _, bad, msgs, _, low = st._log_likelihood(q, None)
        assert bad == 0 and low == 0  # converged, and exact log Z is above every labelling
        assert ll == pytest.approx(exact(q)[0], abs=1e-6)  # BP tol 1e-8 per graph or row
        # warm start from another state's messages reaches the same fixed point
        ll2 = st._log_likelihood(q + 0.1, msgs)[0]
        assert ll2 == pytest.approx(exact(q + 0.1)[0], abs=1e-6)


@pytest.mark.parametrize("kind", MODELS)
def test_exchange_auxiliary_term_estimates_the_partition_ratio(kind, rng):
    # E_{x ~ p(.|w')} exp(S_x(w) - S_x(w')) = Z(w)^R / Z(w')^R (R graphs or rows): the identity
    # that makes log Z cancel
    m = tree_model(n_graphs=2) if kind == "crf" else mrf_model(n_rows=2)
    st = _step(Exchange, m)
    assert st.exact_auxiliary
    q0 = rng.normal(scale=0.5, size=st.d)
    q1 = q0 + rng.normal(scale=0.15, size=st.d)  # a proposal-sized move: light-tailed weights
    t0, t1 = st.likelihood.log_potentials(q0), st.likelihood.log_potentials(q1)
    # the data's score is the likelihood object's unnormalised score
    assert st.field.log_score(t0, st.field.labels) == pytest.approx(st.likelihood.score(q0)[0])
    vals = np.array([np.exp(st.field.log_score(t0, x) - st.field.log_score(t1, x))
                     for x in (st._auxiliary(t1) for _ in range(4000))])
    jt = get_engine("junction_tree", st.field.batch)
    rows = st.field.n_rows
    ratio = np.exp(rows * (jt.log_partition(st.field.batch, *t0).sum()
                           - jt.log_partition(st.field.batch, *t1).sum()))
    assert abs(vals.mean() - ratio) < 5 * vals.std() / np.sqrt(vals.size)


@pytest.mark.parametrize("kind", MODELS)
def test_cd_gradient_with_long_gibbs_runs_is_the_exact_gradient(kind, rng):
    # CD-k from the data with k large draws labels from the model: its mean is the exact gradient
    m = MODELS[kind]()
    st = _step(LangevinCD, m, cd_steps=25)
    q = rng.normal(scale=0.5, size=st.d)
    g = np.array([st.cd_gradient(q) for _ in range(800)])
    exact = random_field_log_likelihood(extract_random_field(m),
                                        get_engine("junction_tree", st.field.batch))(q)[1]
    se = g.std(0) / np.sqrt(g.shape[0])
    assert np.all(np.abs(g.mean(0) - exact) < 5 * se + 1e-9)


@pytest.mark.parametrize("potential", [False, True])
def test_rest_logp_of_a_hierarchical_model_matches_pymc(rng, potential):
    """The rest of the model's log density (priors, other observed variables, potentials) in the
    step's variables, against PyMC's compiled logp; a potential's random variables must be
    replaced by their values (they were redrawn at every call)."""
    m = hierarchical_model(potential=potential)
    st = _step(BetheMH, m)
    assert st.shared  # s is not the step's variable: it is a shared input
    point = m.initial_point()
    point["s_log__"] = np.array(0.4)
    st.shared["s_log__"].set_value(point["s_log__"])
    others = [v for v in m.free_RVs + m.observed_RVs if v.name != "y"]
    f = m.compile_logp(vars=others + list(m.potentials))
    for _ in range(2):
        q = rng.normal(size=st.d)
        point["W"], point["T"] = q[:4].reshape(2, 2), q[4:].reshape(2, 2)
        value, grad = st.rest(q)
        assert value == pytest.approx(float(f(point)), abs=1e-9)
        fd = np.array([(st.rest(q + 1e-6 * e)[0] - st.rest(q - 1e-6 * e)[0]) / 2e-6
                       for e in np.eye(st.d)])
        np.testing.assert_allclose(grad, fd, atol=1e-5)


# ------------------------------------------------------------------ errors and flags
def test_clear_errors():
    m = tree_model()
    with m, pytest.raises(ValueError, match="all random-field weights together"):
        BetheMH([m["W"]])
    with pm.Model() as m2:
        b = GraphBatch.chains([3])
        W = pm.HalfNormal("W", 1.0, shape=(1, 2))
        pmc.CRF("y", graphs=b, node_features=np.ones((3, 1)), node_weights=W,
                observed=np.array([0, 1, 0]))
    with m2, pytest.raises(ValueError, match="untransformed weights"):
        LangevinCD()
    with pm.Model(), pytest.raises(ValueError, match="pmc.CRF or pmc.MRF"):
        pm.Normal("a", 0, 1)
        Exchange()
    with m, pytest.raises(ValueError, match="cd_steps"):
        LangevinCD(cd_steps=0)
    for cls in (BetheMH, Exchange, LangevinCD):
        with m, pytest.raises(ValueError, match=f"{cls.__name__} moves all random-field weights "
                                                "as one block; blocked=False is not supported"):
            cls(blocked=False)
        with m, pytest.raises(ValueError, match="blocked must be True or False; got 'False'"):
            cls(blocked="False")
    with m, pytest.raises(ValueError, match="Exchange: unknown sampler 'gibs'"):
        Exchange(sampler="gibs")
    # counts are whole numbers: 2.5 is refused, not run as 2
    with m, pytest.raises(ValueError, match="cd_steps must be an integer >= 1; got 2.5"):
        LangevinCD(cd_steps=2.5)
    with m, pytest.raises(ValueError, match="aux_sweeps must be an integer >= 1; got 2.5"):
        Exchange(aux_sweeps=2.5)


def test_exchange_beyond_exact_sampling_is_flagged_approximate():
    m = grid_model(rows=4, n_graphs=1)
    with m, pytest.warns(ApproximateInferenceWarning, match="Gibbs"):
        st = Exchange(max_treewidth=2, aux_sweeps=5)
    assert not st.exact_auxiliary
    st.setup_chain(np.random.default_rng(0), 10, 10)
    _, stats = st.step(m.initial_point())
    assert stats[0]["exact_auxiliary"] is False


def test_competence_only_for_random_field_weights():
    m = hierarchical_model()
    with m:
        assert BetheMH.competence(m.rvs_to_values[m["W"]], True) == Competence.COMPATIBLE
        assert BetheMH.competence(m.rvs_to_values[m["s"]], True) == Competence.INCOMPATIBLE
        # offered beside NUTS (IDEAL for continuous variables with gradients), it is not chosen
        _, assigned = assign_step_methods(m, None, methods=[pm.NUTS, BetheMH])
        assert set(assigned) == {pm.NUTS}
        # offered alone, it takes the random-field weights and nothing else
        _, assigned = assign_step_methods(m, None, methods=[BetheMH, pm.Slice])
        assert {v.name for v in assigned[BetheMH]} == {"W", "T"}


# ------------------------------------------------------------------ pm.sample integration
@pytest.mark.parametrize("cls,keys", [
    (BetheMH, {"accepted", "accept_rate", "scaling", "bp_iterations", "bp_nonconverged",
               "bp_bound_violations"}),
    (Exchange, {"accepted", "accept_rate", "scaling", "exact_auxiliary"}),
    (LangevinCD, {"accepted", "accept_rate", "step_size", "grad_norm"}),
])
def test_pm_sample_two_chains_gives_diagnostics_and_stats(cls, keys):
    m = tree_model()
    with m:
        idata = pm.sample(draws=300, tune=300, chains=2, cores=1, step=cls([m["T"], m["W"]]),
                          random_seed=7, progressbar=False, compute_convergence_checks=False)
    assert keys <= set(idata["sample_stats"].data_vars)
    assert idata["posterior"]["W"].shape == (2, 300, 2, 2)
    rhat = az.rhat(idata)["W"].values
    ess = az.ess(idata)["W"].values
    # a short run of a random walk: diagnostics exist and are sane, not yet converged values
    assert np.all(np.isfinite(rhat)) and np.all(rhat > 0.9) and np.all(ess > 2)
    acc = float(idata["sample_stats"]["accept_rate"].mean())
    assert 0.05 < acc <= 1.0


def test_same_seed_same_draws():
    m = tree_model()
    draws = []
    for _ in range(2):
        with m:
            idata = pm.sample(draws=50, tune=50, chains=2, cores=1, step=Exchange(),
                              random_seed=11, progressbar=False, compute_convergence_checks=False)
        draws.append(idata["posterior"]["T"].values)
    np.testing.assert_array_equal(draws[0], draws[1])


def test_compound_step_with_nuts_for_the_other_variables():
    m = hierarchical_model()
    with m:
        idata = pm.sample(draws=100, tune=100, chains=1, step=[BetheMH([m["W"], m["T"]])],
                          random_seed=2, progressbar=False, compute_convergence_checks=False)
    stats = set(idata["sample_stats"].data_vars)
    assert {"accepted", "bp_iterations"} <= stats  # BetheMH's
    assert "diverging" in stats  # NUTS's, for s
    s = idata["posterior"]["s"].values
    assert np.all(s > 0) and np.unique(s).size > 10


@pytest.mark.parametrize("cls", [BetheMH, Exchange, LangevinCD])
def test_compound_step_with_pymc_metropolis_for_the_other_variables(cls):
    # pm.Metropolis also reports "accepted": PyMC's trace refuses a stat name declared with two
    # dtypes ("Sampler statistic accepted appears with different types")
    m = hierarchical_model()
    with m:
        idata = pm.sample(draws=30, tune=20, chains=1, step=[cls([m["W"], m["T"]]),
                                                             pm.Metropolis([m["s"]])],
                          random_seed=2, progressbar=False, compute_convergence_checks=False)
    accepted = idata["sample_stats"]["accepted"].values
    assert accepted.dtype == np.float64 and set(np.unique(accepted)) <= {0.0, 1.0}
    assert np.unique(idata["posterior"]["s"].values).size > 1


def test_multiprocess_sampling():
    m = tree_model()
    with m:
        idata = pm.sample(draws=60, tune=60, chains=2, cores=2, step=BetheMH(),
                          random_seed=5, progressbar=False, compute_convergence_checks=False)
    w = idata["posterior"]["W"].values
    assert w.shape == (2, 60, 2, 2) and not np.array_equal(w[0], w[1])


@pytest.mark.parametrize("cls", [BetheMH, Exchange, LangevinCD])
def test_mrf_model_through_the_same_path(cls):
    m = mrf_model()
    with m:
        idata = pm.sample(draws=100, tune=100, chains=1, step=cls(), random_seed=4,
                          progressbar=False, compute_convergence_checks=False)
    assert idata["posterior"]["w"].shape == (1, 100, 4)
    assert np.unique(idata["posterior"]["w"].values[0, :, 0]).size > 5



def _tree_crf_declared(edge_first: bool) -> pm.Model:
    """The CRF on copies of the 5-node tree with node weights W (3, 2) and a shared table T
    (2, 2), declared in either order (weights of different sizes: a mixed-up ravel shows)."""
    rng = np.random.default_rng(5)
    batch = GraphBatch.from_edges([TREE] * 4, [5] * 4)
    X = rng.normal(size=(batch.n_total_nodes, 3))
    y = rng.integers(0, 2, size=batch.n_total_nodes)
    with pm.Model() as m:
        if edge_first:
            T = pm.Normal("T", 0.0, 1.0, shape=(2, 2))
            W = pm.Normal("W", 0.0, 0.5, shape=(3, 2))
        else:
            W = pm.Normal("W", 0.0, 0.5, shape=(3, 2))
            T = pm.Normal("T", 0.0, 1.0, shape=(2, 2))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    return m


@pytest.mark.parametrize("cls", [BetheMH, Exchange, LangevinCD])
def test_declaration_order_of_the_weights_does_not_change_the_draws(cls):
    # with the weights as the only free variables PyMC hands the step the whole point in
    # declaration order; the step must still read node weights, then edge weights
    draws = []
    for edge_first in (False, True):
        m = _tree_crf_declared(edge_first)
        with m:
            idata = pm.sample(draws=40, tune=40, chains=1, step=cls(), random_seed=3,
                              initvals={"W": np.full((3, 2), 0.1), "T": np.full((2, 2), -0.2)},
                              progressbar=False, compute_convergence_checks=False)
        draws.append({k: idata["posterior"][k].values for k in ("W", "T")})
    for k in ("W", "T"):
        np.testing.assert_array_equal(draws[0][k], draws[1][k])
    assert np.unique(draws[0]["W"][0, :, 0, 0]).size > 3


@pytest.mark.parametrize("cls", [BetheMH, Exchange, LangevinCD])
def test_every_sequential_chain_of_a_compound_step_tunes(cls):
    # PyMC sets ``tune`` only on the outer CompoundStep at the start of a chain
    m = hierarchical_model()
    with m:
        idata = pm.sample(draws=5, tune=30, chains=2, cores=1, step=[cls([m["W"], m["T"]])],
                          random_seed=2, progressbar=False, compute_convergence_checks=False,
                          discard_tuned_samples=False)
    stats = idata["warmup_sample_stats"]
    name = "step_size" if cls is LangevinCD else "scaling"
    for c in range(2):
        scale = stats[name].values[c]
        assert np.unique(scale[np.isfinite(scale)]).size > 10, (cls.__name__, c)


def test_langevin_cd_rejects_divergent_moves_after_tuning():
    m = tree_model(n_graphs=3)
    point = m.initial_point()
    for step_size, diverging in ((30.0, True), (0.01, False)):
        with m:
            st = LangevinCD(step_size=step_size, tune=False)
        st.setup_chain(np.random.default_rng(0), 0, 20)
        for _ in range(5):
            new, stats = st.step(point)
            assert stats[0]["diverging"] is diverging
            moved = not np.array_equal(new["W"], point["W"])
            assert moved is not diverging
    with m, pytest.raises(ValueError, match="max_energy_error"):
        LangevinCD(max_energy_error=0.0)


def test_langevin_cd_in_a_compound_step_stays_bounded():
    # a hyper-prior scale that shrinks makes the tuned step unstable; unadjusted moves grew W
    # to ~1e152 here before divergent moves were rejected
    m = hierarchical_model()
    with m:
        idata = pm.sample(draws=1000, tune=300, chains=1, step=[LangevinCD([m["W"], m["T"]])],
                          random_seed=2, progressbar=False, compute_convergence_checks=False)
    assert np.abs(idata["posterior"]["W"].values).max() < 10.0
    assert idata["sample_stats"]["diverging"].values.any()  # NUTS's or LangevinCD's


@pytest.mark.parametrize("cls", [BetheMH, Exchange, LangevinCD])
def test_tuning_settings_are_checked(cls):
    m = tree_model()
    with m, pytest.raises(ValueError, match="target_accept"):
        cls(target_accept=1.5)
    with m, pytest.raises(ValueError, match="adapt_window"):
        cls(adapt_window=0)

# ------------------------------------------------------------------ Bethe-Laplace proposal
def test_laplace_proposal_is_the_bethe_laplace_covariance_and_accepts_sensibly():
    from pymc_crf.fitters import laplace_init

    m = grid_model(rows=3, n_graphs=3)
    init = laplace_init(m)
    bl = pmc.fit(m, method="bethe_laplace", map="bp", draws=10)
    np.testing.assert_allclose(init.covariance, bl["fit"]["covariance_matrix"].values, atol=1e-8)
    with m:
        step = BetheMH(S=init.covariance)
    a = step.adaptation
    np.testing.assert_allclose(a.chol @ a.chol.T, init.covariance, atol=1e-10)
    assert a.scale(True) == pytest.approx(2.38 / np.sqrt(step.d))
    with m:
        idata = pm.sample(draws=150, tune=150, chains=1, step=step, random_seed=1,
                          initvals=init.starts(1, np.random.default_rng(0))[0],
                          progressbar=False, compute_convergence_checks=False)
    acc = idata["sample_stats"]["accept_rate"].values
    # 2.38^2/d times a covariance close to the posterior's accepts about a quarter of the moves
    # (Roberts, Gelman & Gilks 1997); a unit proposal (sds 1, posterior sds ~0.2) accepts few
    assert 0.1 < acc.mean() < 0.6


def test_laplace_proposal_on_a_forest_is_the_exact_laplace_fit():
    from pymc_crf.fitters import laplace_init

    m = tree_model(n_graphs=3)
    init = laplace_init(m)
    # BP is exact on trees: the BL-BP fit and the exact Laplace fit give the same Gaussian
    bl = pmc.fit(m, method="bethe_laplace", map="exact", covariance="exact", draws=10,
                 progressbar=False)
    np.testing.assert_allclose(init.covariance, bl["fit"]["covariance_matrix"].values,
                               rtol=1e-7, atol=1e-10)


def test_proposal_s_forms_and_errors():
    from pymc_crf.step_methods.adaptation import ProposalAdaptation, proposal_covariance

    np.testing.assert_allclose(proposal_covariance(np.array([1.0, 2.0]), 2), np.diag([1.0, 4.0]))
    with pytest.raises(ValueError, match="shape"):
        proposal_covariance(np.ones(3), 2)
    with pytest.raises(ValueError, match="positive definite"):
        proposal_covariance(np.array([[1.0, 2.0], [2.0, 1.0]]), 2)
    with pytest.raises(ValueError, match="symmetric"):
        proposal_covariance(np.array([[1.0, 0.5], [0.0, 1.0]]), 2)
    m = tree_model()
    for S in ("bethe", "laplace"):  # the Laplace covariance is the fitters' (laplace_init)
        with m, pytest.raises(ValueError, match="laplace_init"):
            BetheMH(S=S)
    # the window estimate shrinks towards a full starting covariance, counted as prior_weight draws
    C0 = np.array([[1.0, 0.5], [0.5, 1.0]])
    ad = ProposalAdaptation(2, 1.0, 0.234, window=10, base_cov=C0, prior_weight=10)
    x = np.random.default_rng(0).normal(size=(20, 2)) * np.array([3.0, 0.5])
    for xi in x:  # 10 skipped, then a first window of 10 draws (2 d = 4 < 10)
        ad.update(xi, 0.3, True)
    S = np.cov(x[10:].T)
    np.testing.assert_allclose(ad.chol @ ad.chol.T, 0.5 * S + 0.5 * C0 + 1e-10 * np.eye(2),
                               atol=1e-9)
