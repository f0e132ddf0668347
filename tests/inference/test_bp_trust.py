"""Issue 36: loopy inference knows its fixed point and shows how far to trust it.

The bound check (any labelling's score is a lower bound on log Z), BP's stability check and
restarts from the symmetric fixed point of zero fields, mean field's restart from a point mass,
and the report keys every iterative engine carries; checked against brute force / the junction
tree on small graphs.
"""

import warnings

import networkx as nx
import numpy as np
import pytest

from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference import (
    ApproximateInferenceWarning,
    BeliefPropagation,
    BruteForce,
    MeanField,
    TreeEP,
)
from pymc_crf.inference.base import labelling_score
from pymc_crf.inference.bethe import message_jacobian_radius
from pymc_crf.inference.junction_tree import JunctionTree
from pymc_crf.inference.loopy import icm, labelling_bound

ANTI = np.array([[[-1.0, 1.0], [1.0, -1.0]]])  # antiferromagnetic, J = 1
FERRO = -ANTI


def _bound_warnings(record):
    return [w for w in record if issubclass(w.category, ApproximateInferenceWarning)
            and "below the score of a single labelling" in str(w.message)]


def _run(engine, batch, node, edge):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        r = engine.run(batch, node, edge)
    return r, _bound_warnings(rec)


@pytest.mark.parametrize("edge", [ANTI, FERRO], ids=["antiferro", "ferro"])
def test_zero_field_grid_leaves_the_symmetric_fixed_point(edge):
    # 8x8 grid, zero fields: uniform messages are a fixed point whatever the coupling, and BP
    # from them returned 92.94 (exact 112.87) below the best labelling's score 112 = 112 edges x 1
    b = GraphBatch.grid(8, 8)
    node = np.zeros((64, 2))
    exact = JunctionTree().log_partition(b, node, edge)[0]
    np.testing.assert_allclose(exact, 112.8732, atol=1e-4)
    stuck, warned = _run(BeliefPropagation(restarts=0), b, node, edge)
    np.testing.assert_allclose(stuck.log_z, 92.9449, atol=1e-4)
    assert stuck.report["bound"][0] == 112.0 and not stuck.report["bound_ok"][0]
    assert len(warned) == 1 and "1 of 1 graphs" in str(warned[0].message)
    r, warned = _run(BeliefPropagation(), b, node, edge)
    assert not warned
    assert r.report["restarts"][0] == 1 and r.report["converged"][0] and r.report["bound_ok"][0]
    # the ordered fixed point: above the bound, below the exact value by the log 2 of the other
    # ordered state (the beliefs pick one of the two)
    assert 112.0 < r.log_z[0] < exact
    np.testing.assert_allclose(r.log_z, 112.1775, atol=1e-3)
    assert np.abs(np.exp(r.log_node)[:, 0] - 0.5).min() > 0.4  # the beliefs are ordered


def test_a_small_field_was_never_stuck_and_is_left_alone():
    b = GraphBatch.grid(8, 8)
    node = np.zeros((64, 2))
    node[0, 0] = 1e-3
    r, warned = _run(BeliefPropagation(), b, node, ANTI)
    np.testing.assert_allclose(r.log_z, 112.1785, atol=1e-3)
    assert not warned and r.report["restarts"][0] == 0 and np.isnan(r.report["radius"][0])
    assert r.report["bound_ok"][0]


def test_large_zero_field_grid():
    # 100x100, J = 4: BP from uniform messages gave 72,414 against the bound 19,800 x 4 = 79,200
    b = GraphBatch.grid(100, 100)
    node = np.zeros((10_000, 2))
    edge = 4.0 * ANTI
    r, warned = _run(BeliefPropagation(), b, node, edge)
    assert not warned and r.report["bound_ok"][0] and r.report["restarts"][0] == 1
    assert r.report["bound"][0] == 79_200.0
    assert 79_200.0 <= r.log_z[0] < 79_200.0 + np.log(2.0)
    stuck = BeliefPropagation(restarts=0, warn=False).run(b, node, edge)
    np.testing.assert_allclose(stuck.log_z, 72_413.80, atol=0.01)


def test_frustrated_triangle_is_a_stable_overestimate():
    # The limit of the checks: antiferromagnetic triangle, J = 5. The symmetric fixed point is
    # stable (radius tanh 5 < 1) and above the bound (15.0 > 5), so BP keeps it although it is
    # 8.2 above the exact log Z: the Bethe approximation itself is wrong here, not BP's search
    b = GraphBatch.from_networkx([nx.cycle_graph(3)])
    node, edge = np.zeros((3, 2)), 5.0 * ANTI
    r, warned = _run(BeliefPropagation(), b, node, edge)
    np.testing.assert_allclose(r.log_z, 15.0001, atol=1e-4)
    np.testing.assert_allclose(BruteForce().log_partition(b, node, edge), 6.7918, atol=1e-4)
    np.testing.assert_allclose(r.report["radius"], np.tanh(5.0), rtol=1e-4)
    assert r.report["restarts"][0] == 0 and r.report["bound_ok"][0] and not warned


def test_frustrated_unstable_symmetric_point_is_kept_when_restarts_return_to_it():
    # Petersen graph, antiferromagnetic J = 2, zero fields: the symmetric point is unstable
    # (radius 1.93) but damped BP comes back to it from all three restarts; it is kept, above
    # the bound 18 and the exact 20.41 (the overestimate the checks cannot see), with its radius
    b = GraphBatch.from_networkx([nx.petersen_graph()])
    node, edge = np.zeros((10, 2)), 2.0 * ANTI
    r, warned = _run(BeliefPropagation(), b, node, edge)
    assert r.report["restarts"][0] == 3 and r.report["bound_ok"][0] and not warned
    np.testing.assert_allclose(r.report["radius"], 1.928, atol=1e-3)
    np.testing.assert_allclose(r.log_z, 26.807, atol=1e-3)
    np.testing.assert_allclose(BruteForce().log_partition(b, node, edge), 20.411, atol=1e-3)
    # ferromagnetic, the symmetric point is below the bound and the first restart leaves it
    r, warned = _run(BeliefPropagation(), b, node, -0.4 * ANTI * 2)
    assert r.report["restarts"][0] == 1 and r.report["bound_ok"][0] and not warned
    np.testing.assert_allclose(r.log_z, 12.123, atol=1e-3)


def _non_backtracking_radius(g):
    arcs = [*g.edges(), *((v, u) for u, v in g.edges())]
    index = {a: i for i, a in enumerate(arcs)}
    B = np.zeros((len(arcs), len(arcs)))
    for (u, v), i in index.items():
        for w in g.neighbors(v):
            if w != u:
                B[index[(v, w)], i] = 1.0
    return np.abs(np.linalg.eigvals(B)).max()


@pytest.mark.parametrize("graph, J", [(nx.grid_2d_graph(3, 3), 0.5), (nx.cycle_graph(5), 2.0),
                                      (nx.complete_graph(4), 0.4), (nx.petersen_graph(), -0.8)])
def test_stability_radius_at_the_symmetric_point(graph, J):
    # zero-field Ising: at uniform messages the linearised update is tanh|J| times the
    # non-backtracking matrix (Mooij & Kappen 2007), so its radius is tanh|J| rho(B)
    b = GraphBatch.from_networkx([graph])
    node = np.zeros((b.n_total_nodes, 2))
    edge = np.array([[[J, -J], [-J, J]]])
    r = BeliefPropagation(restarts=0, warn=False).run(b, node, edge)
    rho = message_jacobian_radius(b, node, edge, r.messages, np.ones(1, np.bool_))
    np.testing.assert_allclose(rho, np.tanh(abs(J)) * _non_backtracking_radius(graph),
                               rtol=2e-3)
    np.testing.assert_allclose(r.report["radius"], rho)


def test_a_stable_symmetric_point_costs_no_restart():
    # couplings all zero (a fitter's start at zero weights): radius 0, nothing rerun
    b = GraphBatch.grid(4, 4, n_graphs=2)
    r, warned = _run(BeliefPropagation(), b, np.zeros((32, 3)), np.zeros((1, 3, 3)))
    assert (r.report["radius"] == 0.0).all() and (r.report["restarts"] == 0).all()
    np.testing.assert_allclose(r.log_z, 16 * np.log(3.0), atol=1e-12)
    assert not warned and r.report["bound_ok"].all()


def test_where_stability_is_checked():
    # "never": no radius, and a stable symmetric point is kept (no restarts); "always": every loopy
    # graph, also at non-uniform fixed points (not on trees, where BP is exact)
    rng = np.random.default_rng(4)
    b = GraphBatch.from_networkx([nx.cycle_graph(3), nx.grid_2d_graph(3, 3), nx.path_graph(3)])
    node = rng.normal(size=(b.n_total_nodes, 2))
    node[:3] = 0.0
    edge = np.repeat(5.0 * ANTI, b.n_edges, axis=0)
    edge[3:] *= 0.1
    never = BeliefPropagation(stability="never").run(b, node, edge)
    assert np.isnan(never.report["radius"]).all() and not never.report["restarts"].any()
    default = BeliefPropagation().run(b, node, edge)
    assert default.report["radius"][0] > 0.999 and np.isnan(default.report["radius"][1:]).all()
    always = BeliefPropagation(stability="always").run(b, node, edge)
    assert (always.report["radius"][:2] < 1.0).all() and np.isnan(always.report["radius"][2])
    np.testing.assert_array_equal(always.log_z, never.log_z)


def test_only_the_suspect_graphs_are_rerun():
    # a batch of a stuck zero-field grid and ordinary random-field graphs: the others keep
    # exactly the fixed point (and report) of a run without restarts
    rng = np.random.default_rng(3)
    b = GraphBatch.from_networkx([nx.grid_2d_graph(4, 4), nx.grid_2d_graph(3, 3),
                                  nx.cycle_graph(5), nx.path_graph(4)])
    node = rng.normal(size=(b.n_total_nodes, 2))
    node[:16] = 0.0
    edge = np.repeat(2.0 * FERRO, b.n_edges, axis=0)
    edge[24:] *= rng.uniform(-0.5, 0.5, (b.n_edges - 24, 1, 1))  # the grid's 24 keep J = 2
    plain = BeliefPropagation(restarts=0, warn=False).run(b, node, edge)
    r, warned = _run(BeliefPropagation(), b, node, edge)
    assert not warned
    assert r.report["restarts"].tolist() == [1, 0, 0, 0]
    assert not plain.report["bound_ok"][0] and r.report["bound_ok"].all()
    np.testing.assert_array_equal(r.log_z[1:], plain.log_z[1:])
    np.testing.assert_array_equal(r.report["iterations"][1:], plain.report["iterations"][1:])
    rows = b.edge_graph[np.arange(2 * b.n_edges) // 2] > 0
    np.testing.assert_array_equal(r.messages[rows], plain.messages[rows])
    assert plain.report["bound"][0] == 48.0 and r.log_z[0] > 48.0


def test_settings_of_the_checks_are_checked():
    with pytest.raises(ValueError, match="restarts"):
        BeliefPropagation(restarts=-1)
    with pytest.raises(ValueError, match="stability"):
        BeliefPropagation(stability="sometimes")
    with pytest.raises(ValueError, match="seed"):
        BeliefPropagation(seed=1.5)


def test_icm_never_lowers_the_score_and_the_bound_is_a_lower_bound(rng):
    b = GraphBatch.from_networkx([nx.complete_graph(5), nx.grid_2d_graph(2, 3),
                                  nx.cycle_graph(4), nx.empty_graph(2)])
    node = rng.normal(0, 1, (b.n_total_nodes, 3))
    edge = rng.normal(0, 3, (b.n_edges, 3, 3))
    exact = BruteForce()
    best = exact.map_assignment(b, node, edge).score
    for _ in range(5):
        start = rng.integers(0, 3, b.n_total_nodes)
        out = icm(b, node, edge, start)
        s0, s1 = labelling_score(b, node, edge, np.stack([start, out]))
        assert (s1 >= s0).all() and (s1 <= best + 1e-12).all()
    found = labelling_bound(b, node, edge, np.log(exact.marginals(b, node, edge).node))
    np.testing.assert_allclose(found.score, labelling_score(b, node, edge, found.labels))
    assert (found.score <= exact.log_partition(b, node, edge)).all()
    # a node without neighbours takes its best label
    np.testing.assert_array_equal(found.labels[-2:], np.argmax(node[-2:], axis=1))


@pytest.mark.parametrize("name", ["bp", "tree_ep", "mean_field"])
def test_every_engine_reports_the_bound_check(name):
    engine = {"bp": BeliefPropagation, "tree_ep": TreeEP, "mean_field": MeanField}[name]()
    rng = np.random.default_rng(5)
    b = GraphBatch.from_networkx([nx.grid_2d_graph(3, 3), nx.complete_graph(4)])
    node = rng.normal(size=(b.n_total_nodes, 2))
    edge = rng.normal(0, 0.5, (b.n_edges, 2, 2))
    r, warned = _run(engine, b, node, edge)
    assert {"iterations", "max_change", "converged", "bound", "bound_ok"} <= set(r.report)
    assert r.report["bound_ok"].all() and not warned
    ex = BruteForce()
    assert (r.report["bound"] <= ex.log_partition(b, node, edge) + 1e-12).all()
    np.testing.assert_allclose(r.report["bound"], ex.map_assignment(b, node, edge).score)
    assert engine.marginals(b, node, edge).report["bound_ok"].all()


def test_mean_field_leaves_its_symmetric_fixed_point():
    # mean field from uniform marginals stays there with zero fields: bound 64 log 2 = 44.4
    # below a labelling's 112; restarted from that labelling's point mass it ends above it
    # and is still a lower bound on the exact log Z
    b = GraphBatch.grid(8, 8)
    node = np.zeros((64, 2))
    r, warned = _run(MeanField(), b, node, ANTI)
    assert not warned and r.report["restarts"][0] == 1 and r.report["bound_ok"][0]
    assert 112.0 <= r.log_z[0] <= JunctionTree().log_partition(b, node, ANTI)[0]


def _random_model(rng):
    """A small loopy graph (cycle, grid or complete, 3-6 nodes), K = 2 or 3, zero fields and
    strong couplings: half symmetric Potts tables +-J, J in [1, 5] (some shared), half tables
    of N(0, 3^2) entries."""
    kind = rng.integers(0, 3)
    if kind == 0:
        g = nx.cycle_graph(int(rng.integers(3, 7)))
    elif kind == 1:
        r, c = [(2, 2), (2, 3), (3, 2)][rng.integers(0, 3)]
        g = nx.convert_node_labels_to_integers(nx.grid_2d_graph(r, c))
    else:
        g = nx.complete_graph(int(rng.integers(3, 7)))
    K = int(rng.integers(2, 4))
    b = GraphBatch.from_networkx([g])
    E = b.n_edges
    if rng.random() < 0.5:
        J = rng.uniform(1, 5, E) * rng.choice([-1, 1], E)
        edge = np.where(np.eye(K, dtype=bool)[None], J[:, None, None],
                        -J[:, None, None] / (K - 1))
        if rng.random() < 0.5:
            edge = edge[:1]
    else:
        edge = rng.normal(0, 3, (E, K, K))
    return b, np.zeros((b.n_total_nodes, K)), edge


def _survey(n):
    """BP with and without restarts on ``n`` random models; counts of bound violations (log Z
    below the best labelling's score, by brute force), warnings and fixes."""
    rng = np.random.default_rng(2026)
    counts = dict.fromkeys(["violated_without_restarts", "warned_without_restarts",
                            "violated", "warned", "unwarned_violations", "fixed_by_restarts",
                            "restarted"], 0)
    for _ in range(n):
        b, node, edge = _random_model(rng)
        best = BruteForce().map_assignment(b, node, edge).score[0]
        slack = 1e-9 * max(1.0, abs(best))
        plain, warned0 = _run(BeliefPropagation(restarts=0), b, node, edge)
        r, warned = _run(BeliefPropagation(), b, node, edge)
        v0, v = plain.log_z[0] < best - slack, r.log_z[0] < best - slack
        counts["violated_without_restarts"] += int(v0)
        counts["warned_without_restarts"] += int(bool(warned0))
        counts["violated"] += int(v)
        counts["warned"] += int(bool(warned))
        counts["unwarned_violations"] += int(v and not warned)
        counts["fixed_by_restarts"] += int(v0 and not v)
        counts["restarted"] += int(r.report["restarts"][0] > 0)
        # a warning is never raised without cause: the check's labelling is real
        assert bool(warned) == (not r.report["bound_ok"][0])
    return counts


def test_no_silent_bound_violation_on_random_small_loopy_graphs():
    c = _survey(40)
    assert c["unwarned_violations"] == 0
    assert c["violated_without_restarts"] > 0 and c["fixed_by_restarts"] > 0


@pytest.mark.slow
def test_no_silent_bound_violation_on_200_random_small_loopy_graphs():
    c = _survey(200)
    # the exact counts of this survey: 19 graphs violate the bound without restarts (all 19
    # warned), the restarts fix 16 of them and the other 3 are warned; pinned so that any change
    # in the check or the restarts shows up here
    assert c["unwarned_violations"] == 0
    assert c["violated_without_restarts"] == c["warned_without_restarts"] == 19
    assert c["fixed_by_restarts"] == 16 and c["violated"] == c["warned"] == 3


def test_map_decoding_under_hard_constraints_reaches_an_allowed_labelling():
    """On a 2 x 3 grid with -inf potentials the max-product beliefs' argmax has probability zero
    (score -inf) though allowed labellings exist: the decoding moves to the best of ICM's starts
    (here the junction tree's MAP) without a warning; where no allowed labelling exists at all,
    it says so."""
    ninf = -np.inf
    b = GraphBatch.from_edges([[[0, 3], [0, 1], [1, 4], [1, 2], [2, 5], [3, 4], [4, 5]]], [6])
    node = np.array([[0., ninf, 1067.99], [0., ninf, -247.92], [0., 173.81, -853.96],
                     [0., 2054.32, -109.77], [0., 1132.95, 1654.05], [0., 1184.15, 133.07]])
    edge = np.array([
        [[0., -567.56, ninf], [224.33, -217.45, ninf], [ninf, ninf, -4.12]],
        [[0., ninf, 988.95], [291.61, -860.22, -350.45], [ninf, -685.93, -1588.74]],
        [[0., ninf, ninf], [ninf, ninf, -1307.18], [ninf, ninf, -2733.50]],
        [[0., ninf, 1692.27], [-43.13, ninf, -1695.37], [ninf, 79.57, ninf]],
        [[0., ninf, ninf], [510.95, 1072.92, ninf], [ninf, 1181.04, -973.08]],
        [[0., ninf, ninf], [1684.91, ninf, 256.88], [ninf, 853.97, -175.69]],
        [[0., ninf, 71.05], [245.70, ninf, 148.85], [341.12, 47.67, 1086.53]]])
    assert labelling_score(b, node, edge, np.argmax(
        BeliefPropagation().decoding_run(b, node, edge).log_node, axis=1))[0] == ninf
    exact = JunctionTree().map_assignment(b, node, edge)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ApproximateInferenceWarning)
        res = BeliefPropagation().map_assignment(b, node, edge)
    np.testing.assert_array_equal(res.labels, exact.labels)
    assert res.score[0] == pytest.approx(exact.score[0])
    # no allowed labelling: a triangle whose edges forbid every pair
    tri = GraphBatch.from_edges([[[0, 1], [1, 2], [0, 2]]], [3])
    with pytest.warns(ApproximateInferenceWarning, match=r"BeliefPropagation: MAP decoding of "
                                                        r"graphs \[0\] found only labellings "
                                                        "of probability zero"):
        res = BeliefPropagation().map_assignment(tri, np.zeros((3, 2)),
                                                 np.full((3, 2, 2), ninf))
    assert res.score[0] == ninf
