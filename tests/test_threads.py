"""Worker threads: the thread-count setting, ``run_parts``, and the chain kernels split into
parts, which give the same numbers bit for bit with any number of threads."""

import multiprocessing
import threading
import time
import warnings

import numpy as np
import pytest

import pymc_crf as pmc
from pymc_crf import threads
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.inference.chain import ChainEngine, blocks, dispatch, parts


@pytest.fixture(autouse=True)
def _default_threads():
    yield
    pmc.set_num_threads(None)


def test_setting_environment_and_default(monkeypatch):
    monkeypatch.delenv("PYMC_CRF_NUM_THREADS", raising=False)
    assert pmc.get_num_threads() == 1  # one unless asked (OpenBLAS's spinning workers)
    monkeypatch.setenv("PYMC_CRF_NUM_THREADS", "3")
    assert pmc.get_num_threads() == 3
    pmc.set_num_threads(2)
    assert pmc.get_num_threads() == 2  # the setting wins over the environment
    pmc.set_num_threads(None)
    assert pmc.get_num_threads() == 3
    monkeypatch.setenv("PYMC_CRF_NUM_THREADS", "0")
    with pytest.raises(ValueError, match="PYMC_CRF_NUM_THREADS"):
        pmc.get_num_threads()
    monkeypatch.setenv("PYMC_CRF_NUM_THREADS", "two")
    with pytest.raises(ValueError, match="PYMC_CRF_NUM_THREADS"):
        pmc.get_num_threads()


def test_numpy_integers_are_thread_counts():
    # a count computed with numpy (np.int64) is a whole number as much as a Python int
    pmc.set_num_threads(np.int64(2))
    assert pmc.get_num_threads() == 2 and type(pmc.get_num_threads()) is int


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "x", np.int64(0), np.bool_(True)])
def test_bad_thread_counts_are_refused(bad):
    with pytest.raises((TypeError, ValueError), match="number of threads"):
        pmc.set_num_threads(bad)


def test_run_parts_runs_every_part_on_several_threads_and_helpers_exit_when_idle(monkeypatch):
    monkeypatch.setattr(threads, "_IDLE_SECONDS", 0.2)
    time.sleep(0.3)  # helpers of earlier tests have left
    before = threading.active_count()
    seen = {}
    busy = [False, False]

    def part(p, w):
        assert not busy[w]  # one part at a time per worker: w may index per-worker buffers
        busy[w] = True
        time.sleep(0.02)
        seen[p] = (threading.get_ident(), w)
        busy[w] = False

    threads.run_parts(part, 6, 2)
    assert sorted(seen) == list(range(6))
    assert len({t for t, _ in seen.values()}) == 2
    assert {w for _, w in seen.values()} == {0, 1}
    helper = next(t for t, _ in seen.values() if t != threading.get_ident())
    seen.clear()
    threads.run_parts(part, 4, 2)  # the helper is reused by the next call
    assert {t for t, _ in seen.values()} == {threading.get_ident(), helper}
    assert threading.active_count() == before + 1
    time.sleep(0.5)
    assert threading.active_count() == before  # a later fork forks no helper threads
    seen.clear()
    threads.run_parts(part, 2, 2)  # and a new one is started after it has left
    assert len({t for t, _ in seen.values()}) == 2


def test_run_parts_waits_for_every_part_before_raising():
    pmc.set_num_threads(2)
    done = []

    def part(p, w):
        if p == 1:
            raise RuntimeError("part 1 failed")
        time.sleep(0.05)
        done.append(p)

    with pytest.raises(RuntimeError, match="part 1 failed"):
        threads.run_parts(part, 4, 2)
    assert sorted(done) == [0, 2, 3]


def test_a_call_while_another_call_runs_helpers_runs_in_its_own_thread():
    pmc.set_num_threads(2)
    seen = []
    with threads._busy:  # another caller's helpers are running
        threads.run_parts(lambda p, w: seen.append((threading.get_ident(), w)), 3, 2)
    assert seen == [(threading.get_ident(), 0)] * 3


def _child(q):
    seen = set()
    threads.run_parts(lambda p, w: (time.sleep(0.02), seen.add(threading.get_ident())), 4, 2)
    q.put((len(seen), threads.get_num_threads()))


def test_a_forked_child_runs_parts_on_threads():
    pmc.set_num_threads(2)
    threads.run_parts(lambda p, w: time.sleep(0.01), 2, 2)
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    # a helper of the parent is alive at the fork (Python warns about forking a threaded
    # process), and _busy is held by the parent: the child starts with neither
    with warnings.catch_warnings(), threads._busy:
        warnings.simplefilter("ignore", DeprecationWarning)
        proc = ctx.Process(target=_child, args=(q,))
        proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert q.get(timeout=5) == (2, 2)  # the parent's setting carries over


def _ragged(seed, K, n=300):
    rng = np.random.default_rng(seed)
    # lengths 2-40, and three longer than a per-edge lane block holds at K = 10 (81 positions)
    lengths = np.concatenate([rng.integers(2, 41, size=n), [90, 120, 200]])
    rng.shuffle(lengths)
    batch = GraphBatch.chains(lengths)
    return rng, batch


def _all_thread_counts(f):
    out = []
    for n in (1, 2, 3):
        pmc.set_num_threads(n)
        out.append(f())
    pmc.set_num_threads(None)
    for other in out[1:]:
        for a, b in zip(out[0], other, strict=True):
            assert np.array_equal(a, b)
    return out[0]


def _close(parts, serial):
    for a, b in zip(parts, serial, strict=True):
        a, b = np.asarray(a), np.asarray(b).reshape(np.shape(a))
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12 * max(1.0, np.abs(b).max()))


@pytest.mark.parametrize("table", ["shared", "per-edge"])
@pytest.mark.parametrize("scale", [1.0, 300.0])
def test_chain_parts_match_the_single_thread_kernel(table, scale):
    K = 10
    rng, batch = _ragged(0, K)
    plan = blocks._block_plan(batch.node_offsets, K, table == "per-edge")
    assert plan[5].shape[0] > 2  # the batch is split into parts
    node = scale * rng.normal(size=(batch.n_total_nodes, K))
    edge = scale * rng.normal(size=(1 if table == "shared" else batch.n_edges, K, K))
    edge[..., 0, 1] = -np.inf  # a forbidden transition
    gw = rng.random(batch.n_graphs)
    eng = ChainEngine()
    got = _all_thread_counts(lambda: eng.log_z_and_weighted_marginals(batch, node, edge, gw))
    serial = parts._forward_backward_lanes(node, edge, batch.node_offsets, batch.edge_offsets,
                                            True, gw)
    _close(got, serial)
    # the lanes run as in one thread: only the sums over graphs may differ by rounding
    np.testing.assert_array_equal(got[0], serial[0])
    np.testing.assert_array_equal(got[1], serial[1])
    if table == "per-edge":
        np.testing.assert_array_equal(got[2], serial[2])
    assert np.all(np.isfinite(got[0]))


@pytest.mark.parametrize("scale", [1.0, 300.0])
def test_feature_chain_parts_match_the_single_thread_kernel(scale):
    K = 4
    rng, batch = _ragged(1, K, n=2000)
    plan = blocks._block_plan(batch.node_offsets, K, True)
    assert plan[5].shape[0] > 2
    node = scale * rng.normal(size=(batch.n_total_nodes, K))
    Xe = np.column_stack([np.ones(batch.n_edges), rng.normal(size=(batch.n_edges, 2))])
    We = scale * rng.normal(size=(3, K, K))
    gw = rng.random(batch.n_graphs)
    eng = ChainEngine()
    got = _all_thread_counts(lambda: eng.log_z_and_feature_marginals(batch, node, Xe, We, gw))
    serial = parts._forward_backward_features_lanes(node, Xe, We.reshape(3, -1),
                                                     batch.node_offsets, batch.edge_offsets, True,
                                                     gw)
    _close(got, serial)
    np.testing.assert_array_equal(got[0], serial[0])
    np.testing.assert_array_equal(got[1], serial[1])
    lz = _all_thread_counts(lambda: (eng.feature_log_partition(batch, node, Xe, We),))[0]
    np.testing.assert_array_equal(lz, got[0])


def _threaded_inputs(K: int):
    """A ragged batch that splits into parts on 2 threads (set here), its tables, constant and
    random edge features with their weights, and graph weights."""
    rng, batch = _ragged(2, K)
    node = rng.normal(size=(batch.n_total_nodes, K))
    edge = rng.normal(size=(batch.n_edges, K, K))
    Xe = np.column_stack([np.ones(batch.n_edges), rng.normal(size=batch.n_edges)])
    We = rng.normal(size=(2, K * K))
    g = rng.random(batch.n_graphs)
    pmc.set_num_threads(2)
    return batch, node, edge, Xe, We, g


@pytest.mark.slow  # compiles a model's threaded lane kernels (~14 s with empty caches)
def test_compiled_dispatch_hands_large_batches_to_the_threads():
    """The compiled dispatchers the Ops' closures call (``_forward_backward_from_numba`` and its
    features twin) give the engine's numbers, through the object-mode hand-off for a batch that
    splits into parts."""
    K = 10
    batch, node, edge, Xe, We, g = _threaded_inputs(K)
    eng = ChainEngine()
    no, eo = batch.node_offsets, batch.edge_offsets
    assert parts._splits(no, K, True)  # the hand-off is taken
    ref = eng.log_z_and_weighted_marginals(batch, node, edge, g)
    for a, b in zip(dispatch._forward_backward_from_numba(node, edge, no, eo, True, g), ref, strict=True):
        np.testing.assert_array_equal(a, b)
    ref = eng.log_z_and_feature_marginals(batch, node, Xe, We.reshape(2, K, K), g)
    got = dispatch._forward_backward_features_from_numba(node, Xe, We, no, eo, True, g)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])
    np.testing.assert_array_equal(got[2].reshape(ref[2].shape), ref[2])


# Four closures compiled for a large batch, kept out of the default run's budget. The default run
# checks the dispatchers above and the closures' own code on small batches
# (test_chain.test_numba_kernels).
@pytest.mark.slow
def test_compiled_kernels_hand_large_batches_to_the_threads():
    """The njit closures of the compiled Ops give the engine's numbers, through the object-mode
    hand-off for a batch that splits into parts."""
    K = 10
    batch, node, edge, Xe, We, g = _threaded_inputs(K)
    eng = ChainEngine()
    log_z, vjp = eng.numba_kernels(batch)
    ref = eng.log_z_and_weighted_marginals(batch, node, edge, g)
    for a, b in zip(vjp(node, edge, g), ref, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(log_z(node, edge), ref[0])
    flz, fvjp = eng.feature_numba_kernels(batch)
    ref = eng.log_z_and_feature_marginals(batch, node, Xe, We.reshape(2, K, K), g)
    got = fvjp(node, Xe, We, g)
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])
    np.testing.assert_array_equal(got[2].reshape(ref[2].shape), ref[2])
    np.testing.assert_array_equal(flz(node, Xe, We), ref[0])


def test_concurrent_callers_get_the_same_numbers():
    """Callers in several threads at once (nutpie's chains): one holds the pool, the others
    run their parts in their own threads; every caller gets the one-thread numbers."""
    K = 10
    rng, batch = _ragged(3, K)
    node = rng.normal(size=(batch.n_total_nodes, K))
    Xe = np.column_stack([np.ones(batch.n_edges), rng.normal(size=batch.n_edges)])
    We = rng.normal(size=(2, K, K))
    eng = ChainEngine()
    pmc.set_num_threads(1)
    ref = eng.log_z_and_feature_marginals(batch, node, Xe, We)
    pmc.set_num_threads(2)
    results = [None] * 4

    def call(i):
        for _ in range(3):
            results[i] = eng.log_z_and_feature_marginals(batch, node, Xe, We)

    workers = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    for r in results:
        for a, b in zip(r, ref, strict=True):
            np.testing.assert_array_equal(a, b)


def test_lane_buffers_are_kept_for_the_next_call_and_never_shared():
    parts._kept_buffers.clear()
    a = parts._take_buffers(2, 100)
    b = parts._take_buffers(2, 100)  # a concurrent call: buffers of its own
    assert len({id(x) for x in a + b}) == 4 and all(x.shape[0] >= 100 for x in a + b)
    parts._keep_buffers(a)
    parts._keep_buffers(b)
    assert len(parts._kept_buffers) == parts._KEPT_BUFFERS
    c = parts._take_buffers(2, 100)
    assert {id(x) for x in c} <= {id(x) for x in a + b}  # reused, not reallocated
    d = parts._take_buffers(2, 1000)  # too short ones are not used
    assert all(x.shape[0] >= 1000 for x in d)
    parts._kept_buffers.clear()
