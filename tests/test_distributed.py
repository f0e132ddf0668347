"""Corpora on Dask (``pymc_crf.distributed``): prediction over partitions equals the local call,
and the data-parallel MAP reaches the single-process optimum, with shards built on the workers from
a partitioned CoNLL file."""

import gzip
import logging
import os
import warnings
from pathlib import Path

import numpy as np
import pymc as pm
import pytest

import pymc_crf as pmc
from pymc_crf import distributed as pd_
from pymc_crf.datasets import data_dir, read_conll2000, token_features
from pymc_crf.features import FeatureVectorizer, encode_tags, sequence_batch
from pymc_crf.model import objective

distributed = pytest.importorskip("distributed")
db = pytest.importorskip("dask.bag")


@pytest.fixture(scope="module")
def client():
    """One in-process cluster for the module: 2 workers, 1 thread each."""
    logging.getLogger("distributed").setLevel(logging.ERROR)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                       dashboard_address=None)
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


@pytest.fixture(scope="module")
def loop_fit(loop_model):
    return pmc.fit(loop_model, method="bethe_laplace", draws=40, random_seed=1, progressbar=False)


def _parts(data, cuts):
    edges = [0, *cuts, data.graphs.n_graphs]
    return [data.subset(np.arange(a, b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


@pytest.mark.parametrize("method", ["average", "bpe", "map"])
def test_predict_over_partitions_equals_local(client, loop_data, loop_fit, method):
    test = loop_data[1]
    local = pmc.predict(loop_fit, test, method, draws=25, random_seed=3)
    dist = pd_.predict(loop_fit, _parts(test, [17, 30]), method, client=client, draws=25,
                       random_seed=3)
    np.testing.assert_array_equal(dist.marginals, local.marginals)
    np.testing.assert_array_equal(dist.labels, local.labels)
    assert dist.error_rate == local.error_rate


def test_predict_over_a_bag_and_futures(client, loop_data, loop_fit):
    test = loop_data[1]
    local = pmc.predict(loop_fit, test, "average", draws=None)
    bag = db.from_sequence(_parts(test, [5, 20, 21, 40]), npartitions=3)
    from_bag = pd_.predict(loop_fit, bag, "average", client=client, draws=None)
    np.testing.assert_array_equal(from_bag.marginals, local.marginals)
    futures = client.scatter(_parts(test, [25]))
    from_futures = pd_.predict(loop_fit, futures, "average", client=client, draws=None)
    np.testing.assert_array_equal(from_futures.marginals, local.marginals)
    assert from_bag.error_rate == from_futures.error_rate == local.error_rate


def test_a_scheduler_address_is_a_client(client, loop_data, loop_fit):
    test = loop_data[1]
    local = pmc.predict(loop_fit, test, "bpe")
    far = pd_.predict(loop_fit, _parts(test, [10]), "bpe", client=client.scheduler.address)
    np.testing.assert_array_equal(far.marginals, local.marginals)


def test_predict_refuses_storing(client, loop_data, loop_fit):
    with pytest.raises(ValueError, match="corpus is not on the client"):
        pd_.predict(loop_fit, [loop_data[1]], client=client, predictions=True)


def test_prediction_payload_leaves_training_groups(loop_fit):
    payload = pd_.prediction_payload(loop_fit)
    assert "log_likelihood" not in payload.children and "observed_data" not in payload.children
    assert {"posterior", "fit"} <= set(payload.children)
    assert payload.attrs["crf"] == loop_fit.attrs["crf"]


def _max_abs_diff(a, b):
    return float(np.max(np.abs(a["posterior"]["w"].values - b["posterior"]["w"].values)))


def _polished(result, model, gtol):
    """The single-process MAP polished by the same gradient rule on the single-process
    objective (``CRFLogLikelihood`` of the whole data plus the prior)."""
    spec = pmc.fitters.extract_crf(model)
    lik = objective.CRFLogLikelihood(spec)
    prior = objective.GaussianLogPrior(spec)
    x0 = spec.flatten({w.name: result["posterior"][w.name].values[0, 0] for w in spec.weights})
    x, _ = pd_.polish(lambda x: -(lik(x)[1] + prior(x)[1]), x0, gtol)
    return spec.unflatten(x)


def test_data_parallel_map_reaches_single_process_optimum(client, loop_model):
    # L-BFGS stops on the objective's rounding: both runs end with max |grad| ~ 1e-7, their
    # weights ~ 2e-7 apart; the strict stopping rule is on the gradient (Newton-Krylov polish,
    # max |grad| <= 1e-11, i.e. |w - w*| <= 5e-11 at prior precision 1/5)
    opts = {"gtol": 1e-11, "ftol": 0.0, "maxiter": 5000, "progressbar": False}
    single = pmc.fit(loop_model, method="map", **opts)
    dist = pd_.fit_map(loop_model, client, n_shards=4, polish_gtol=1e-11, **opts)
    assert _max_abs_diff(single, dist) < 1e-6
    exact = _polished(single, loop_model, 1e-11)["w"]
    assert float(np.max(np.abs(dist["posterior"]["w"].values[0, 0] - exact))) < 1e-8
    assert json_settings(dist)["n_shards"] == 4 and json_settings(dist)["distributed"]
    spec = pmc.fitters.extract_crf(loop_model)
    at_dist = objective.CRFLogLikelihood(spec).pointwise(
        dist["posterior"]["w"].values[0, 0].ravel())
    np.testing.assert_allclose(dist["log_likelihood"]["t"].values[0, 0], at_dist, rtol=0,
                               atol=1e-12)
    assert abs(float(dist["optimizer_result"]["objective"])
               - float(single["optimizer_result"]["objective"])) < 1e-9
    assert float(dist["optimizer_result"]["grad_norm"]) < 1e-10
    assert set(dist.children) >= {"posterior", "log_likelihood", "observed_data",
                                  "optimizer_result"}


def json_settings(result):
    import json

    return json.loads(result.attrs["settings"])


@pytest.mark.parametrize("embed_bytes", [1 << 20, 0], ids=["weights-in-tasks", "scattered"])
def test_sharded_objective_equals_the_whole(client, loop_model, monkeypatch, embed_bytes):
    # weights larger than _EMBED_BYTES are scattered to the workers and the workers' sums added
    # on a worker; smaller ones go in the tasks and the sums are added on the client
    monkeypatch.setattr(pd_, "_EMBED_BYTES", embed_bytes)
    spec = pmc.fitters.extract_crf(loop_model)
    whole = objective.CRFLogLikelihood(spec)
    w = np.random.default_rng(0).normal(size=spec.flat_size)
    with pd_.ShardedLogLikelihood(client, spec, n_shards=3) as lik:
        value, grad = lik(w)
        assert lik.n_graphs == [3, 2, 3] and sorted(set(lik.workers)) == sorted(
            client.scheduler_info()["workers"])
        # shards 0 and 2 share a worker, whose one task sums them
        assert sorted(len(v) for v in lik._by_worker.values()) == [1, 2]
        pointwise = lik.pointwise(w)
        assert lik.n_evaluations == 1
    assert lik._by_worker == {}  # closed: no futures kept
    v0, g0 = whole(w)
    assert abs(value - v0) < 1e-10 and np.max(np.abs(grad - g0)) < 1e-10
    np.testing.assert_allclose(pointwise, whole.pointwise(w), rtol=0, atol=1e-12)


def test_data_parallel_laplace_is_the_exact_laplace(client, loop_model):
    single = pmc.fit(loop_model, method="bethe_laplace", map="exact", covariance="exact",
                     draws=50, random_seed=0, progressbar=False)
    dist = pd_.fit_laplace(loop_model, client, n_shards=3, draws=50, random_seed=0)
    m0, m1 = single["fit"]["mean_vector"].values, dist["fit"]["mean_vector"].values
    c0, c1 = single["fit"]["covariance_matrix"].values, dist["fit"]["covariance_matrix"].values
    # the single-process fit's L-BFGS stops ~1e-6 from the mode (its objective's rounding), ours
    # is polished to max |grad| <= 1e-9
    assert np.max(np.abs(m0 - m1)) < 1e-5
    assert np.max(np.abs(c0 - c1)) < 1e-5 * np.max(np.abs(c0))
    # the shards' curvature is the whole data's at the same point
    spec = pmc.fitters.extract_crf(loop_model)
    whole = pd_._negative_hessian(objective.CRFLogLikelihood(spec), m1)
    with pd_.ShardedLogLikelihood(client, spec, n_shards=3) as lik:
        np.testing.assert_allclose(lik.negative_hessian(m1), whole, rtol=0, atol=1e-10)
    # the same seed gives the single-process draws (both from the precision's Cholesky factor)
    np.testing.assert_allclose(dist["posterior"]["w"].values, single["posterior"]["w"].values,
                               rtol=0, atol=1e-4)
    assert dist["log_likelihood"]["t"].shape == (1, 50, 8)
    spec_ll = objective.CRFLogLikelihood(spec)
    w0 = dist["posterior"]["w"].values[0, 7].ravel()
    np.testing.assert_allclose(dist["log_likelihood"]["t"].values[0, 7], spec_ll.pointwise(w0),
                               rtol=0, atol=1e-12)
    assert dist.attrs["method"] == "laplace"
    with warnings.catch_warnings():  # ArviZ's Pareto k warning: 8 graphs, 50 draws
        warnings.simplefilter("ignore", UserWarning)
        assert pmc.loo(dist, loop_model).approx_posterior


def test_fit_map_refuses_other_priors(client):
    data, _ = pmc.datasets.bcrf_synthetic("loop", n_train=4, n_test=1, seed=0)
    with pm.Model(coords=data.coords) as model:
        w = pm.Laplace("w", 0.0, 1.0, dims=("edge_feature", "label_i", "label_j"))
        pmc.CRF("t", graphs=data.graphs, edge_features=data.edge_features, edge_weights=w,
                potential="probit", observed=data.padded_labels, dims=("graph", "position"))
    with pytest.raises(ValueError, match="fixed Gaussian prior"):
        pd_.fit_map(model, client)
    with pytest.raises(ValueError, match="more than the 4 graphs"):
        pd_.shard_ranges(4, 5)


# ------------------------------------------------------------------ CoNLL shards on the workers
N_SENTENCES = 60


@pytest.fixture(scope="module")
def conll_file(tmp_path_factory):
    """The first 60 training sentences of CoNLL-2000 as a gzip file of its own."""
    if not data_dir("conll2000").exists():
        pytest.skip(f"{data_dir('conll2000')} not found (the shared data folder)")
    words, pos, chunks = read_conll2000("train")
    path = Path(tmp_path_factory.mktemp("conll")) / "part.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for w, p, c in list(zip(words, pos, chunks, strict=True))[:N_SENTENCES]:
            fh.writelines(f"{a} {b} {d}\n" for a, b, d in zip(w, p, c, strict=True))
            fh.write("\n")
    return path, words[:N_SENTENCES], pos[:N_SENTENCES], chunks[:N_SENTENCES]


def _chain_model(X, y, lengths, K, sd=1.0):
    F = X.shape[1]
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, sd, shape=(F, K))
        T = pm.Normal("T", 0.0, sd, shape=(K, K))
        pmc.CRF("y", graphs=sequence_batch(lengths), node_features=X, node_weights=W,
                edge_weights=T, observed=y)
    return model


def test_conll_shards_built_on_workers(client, conll_file):
    path, words, pos, chunks = conll_file
    assert pd_.count_sentences(path) == N_SENTENCES
    ranges = pd_.sentence_ranges(N_SENTENCES, 4)
    vec, classes = pd_.conll_vocabulary(client, path, ranges)
    local_vec = FeatureVectorizer(min_freq=1)
    X = local_vec.fit_transform([token_features(w, p) for w, p in zip(words, pos, strict=True)])
    assert vec.vocabulary_ == local_vec.vocabulary_
    assert classes == sorted({t for s in chunks for t in s})
    y, _ = encode_tags(chunks, classes)
    shards = pd_.conll_shards(client, path, ranges, vec, classes)
    whole = pmc.CRFData(sequence_batch(words), y, X, n_labels=len(classes))
    for (a, b), fut in zip(ranges, shards, strict=True):
        shard = fut.result()
        sub = whole.subset(np.arange(a, b))
        assert (shard.node_features != sub.node_features).nnz == 0
        np.testing.assert_array_equal(shard.labels, sub.labels)
        np.testing.assert_array_equal(shard.graphs.n_nodes, sub.graphs.n_nodes)

    # prediction of the shards where they live equals the local call exactly (each shard runs
    # in the chain-engine tier the whole corpus takes, whatever its own size)
    with warnings.catch_warnings():  # 30 iterations: a fit short of the mode is enough here
        warnings.simplefilter("ignore", pmc.ConvergenceWarning)
        fit = pmc.fit(_chain_model(X, y, [len(s) for s in words], len(classes)), method="map",
                      maxiter=30, progressbar=False)
    local = pmc.predict(fit, whole, "map")
    far = pd_.predict(fit, shards, "map", client=client)
    np.testing.assert_array_equal(far.labels, local.labels)
    np.testing.assert_array_equal(far.marginals, local.marginals)


@pytest.mark.slow
def test_worker_processes_import_this_checkout(loop_data, loop_fit):
    """Worker processes inherit PYTHONPATH: they run this checkout's package, and a prediction
    through pickled payloads equals the local one."""
    root = str(Path(pmc.__file__).parent)
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, env=env) as cluster, \
            distributed.Client(cluster) as c:
        files = c.run(lambda: str(Path(__import__("pymc_crf").__file__).parent))
        assert set(files.values()) == {root}
        test = loop_data[1]
        local = pmc.predict(loop_fit, test, "average", draws=10)
        far = pd_.predict(loop_fit, _parts(test, [20]), "average", client=c, draws=10)
        np.testing.assert_array_equal(far.marginals, local.marginals)


@pytest.mark.slow
def test_map_from_worker_side_conll_shards(client, conll_file):
    """MAP from shards built on the workers, with a one-sentence template model for the weights
    and priors, against the single-process fit of the whole file (60 s on the loaded machine)."""
    path, words, pos, chunks = conll_file
    ranges = pd_.sentence_ranges(N_SENTENCES, 4)
    vec, classes = pd_.conll_vocabulary(client, path, ranges)
    shards = pd_.conll_shards(client, path, ranges, vec, classes)
    X = vec.transform([token_features(w, p) for w, p in zip(words, pos, strict=True)])
    y, _ = encode_tags(chunks, classes)
    model = _chain_model(X, y, [len(s) for s in words], len(classes))
    n0 = len(words[0])
    template = _chain_model(X[:n0], y[:n0], [n0], len(classes))
    opts = {"gtol": 1e-9, "ftol": 0.0, "maxiter": 5000, "progressbar": False}
    single = pmc.fit(model, method="map", optimizer="lbfgs", **opts)
    dist = pd_.fit_map(template, client, shards=shards, optimizer="lbfgs", polish_gtol=1e-10,
                       **opts)
    exact = _polished(single, model, 1e-10)
    for name in ("W", "T"):
        assert np.abs(single["posterior"][name].values - dist["posterior"][name].values).max() \
            < 1e-5
        diff = np.abs(exact[name] - dist["posterior"][name].values[0, 0]).max()
        assert diff < 1e-8, (name, diff)
    assert "observed_data" not in dist.children and "log_likelihood" not in dist.children



def test_tagger_marginals_on_the_cluster_equal_the_local_ones(client):
    """``CRFTagger.predict_marginals(X, client=...)`` returns the local call's marginals bit for
    bit (MAP and a posterior averaged over draws), with empty sentences kept in place."""
    rng = np.random.default_rng(3)
    words = [[str(w) for w in rng.choice(["a", "b", "c", "d"], size=int(rng.integers(1, 6)))]
             for _ in range(30)]
    X = [[{"w": w, "prev": s[i - 1] if i else "BOS"} for i, w in enumerate(s)] for s in words]
    y = [["B" if w in "ab" else "I" for w in s] for s in words]
    for method, opts in (("map", {}), ("bethe_laplace", {"covariance": "exact", "draws": 20})):
        tagger = pmc.CRFTagger(method=method, method_options=opts, random_state=0).fit(X, y)
        test = [*X[:10], [], *X[10:20]]
        local = tagger.marginals_array(test)
        far = tagger.marginals_array(test, client=client, n_partitions=3)
        np.testing.assert_array_equal(far, local)
        assert tagger.predict_marginals(test, client=client)[10] == []


def test_tagger_on_the_cluster_with_fewer_sentences_than_partitions(client):
    """Two non-empty sentences with the default 4 partitions: one partition per sentence."""
    X = [[{"w": "a"}, {"w": "b"}], [{"w": "b"}], [{"w": "a"}]]
    y = [["B", "I"], ["I"], ["B"]]
    tagger = pmc.CRFTagger(method="map", random_state=0).fit(X, y)
    test = [X[0], [], X[1]]
    np.testing.assert_array_equal(tagger.marginals_array(test, client=client),
                                  tagger.marginals_array(test))
    assert tagger.predict_marginals([[], X[2]], client=client, n_partitions=3)[0] == []


def test_fit_laplace_refuses_missing_labels(client):
    """The shards' curvature is the Fisher information of fully observed labels; with labels
    summed out it is not the Hessian, as the single-process method='laplace' refuses too."""
    data, _ = pmc.datasets.bcrf_synthetic("loop", n_train=4, n_test=1, seed=0)
    labels = np.array(data.labels, copy=True)
    labels[[0, 3]] = -1
    with pm.Model() as model:
        w = pm.Normal("w", 0.0, 1.0, shape=(6, 2, 2))
        pmc.CRF("t", graphs=data.graphs, edge_features=data.edge_features, edge_weights=w,
                observed=labels)
    with pytest.raises(ValueError, match="fit_laplace needs every label observed; this model "
                                         "has 2 missing"):
        pd_.fit_laplace(model, client, draws=5)


def test_a_missing_or_closed_client_is_named(client, loop_data, loop_fit, loop_model):
    with pytest.raises(TypeError, match="needs a distributed.Client or a scheduler's address"):
        pd_.predict(loop_fit, [loop_data[1]], "bpe", client=None)
    closed = distributed.Client(client.scheduler.address)
    closed.close()
    with pytest.raises(ValueError, match="the Dask client is closed"):
        pd_.predict(loop_fit, [loop_data[1]], "bpe", client=closed)
    with pytest.raises(ValueError, match="the Dask client is closed"):
        pd_.fit_map(loop_model, closed)


def test_a_shard_with_the_wrong_feature_width_is_named(loop_model, loop_data):
    """A shard's features are checked against the model's weights where the worker builds its
    likelihood, as local prediction checks them (not a shape error in a feature product)."""
    from dataclasses import replace

    spec = pmc.fitters.extract_crf(loop_model)
    layout = pd_._layout(spec)
    good = pd_.ShardData.from_crf_data(loop_data[0])
    assert pd_._build_shard(layout, spec.engine, good).batch.n_graphs == loop_data[0].graphs.n_graphs
    narrow = replace(good, edge_features=good.edge_features[:, :-1])
    with pytest.raises(ValueError, match="edge features have 5 columns; the model's edge "
                                         "weights expect 6"):
        pd_._build_shard(layout, spec.engine, narrow)
    with pytest.raises(ValueError, match="shard has no edge features"):
        pd_._build_shard(layout, spec.engine, replace(good, edge_features=None))
