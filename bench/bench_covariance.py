"""Benchmark: the exact Laplace curvature by blocks of directions, and covariances at CoNLL scale.

Run:  .venv/bin/python bench/bench_covariance.py [--old-columns 200] [--sentences N] [--rank 20]
      [--skip-conll] [--skip-dense]
      .venv/bin/python bench/bench_covariance.py --accuracy [20 100 400]

(Single-threaded BLAS, set before numpy loads, as in the other benchmarks of this shared 2-core
machine.)

1. Exact Hessian, dense features (issue 38 item 5). A synthetic chain CRF: 26 labels, 128 dense
   features uniform in [0, 1] plus a bias column (F = 129), one (26, 26) transition table, 387
   positions in 45 chains (lengths 4 to 14), N(0, 1) priors: d = 129 * 26 + 676 = 4,030 weights.
   Weights: a MAP fit by ``pmc.fit(method="map")``. Timed: ``exact_fisher_matrix`` (new path),
   the previous path (``fisher_vector_product`` column by column, as ``fisher_matrix`` did
   before; ``--old-columns`` columns timed and scaled to d), the Cholesky inverse of the
   precision against the ``eigh`` inverse used before, and the check against finite differences
   of the engine's gradient (central, step 1e-5, on 300 random columns; relative error
   ``max |H - H_fd| / max |H|``).
1b. (``--accuracy``, alone) On that model at its MAP: the marginal standard deviations of the
   per-position diagonal (``diagonal_laplace_sd``, before), the exact-diagonal approximation and
   low rank k + diagonal against those of the exact covariance.
1c. (``--fits``, alone) ``pmc.fit(model, method="laplace", covariance=c, draws=200)`` on that
   model for ``c`` in ``"exact"`` (the dense precision, Cholesky draws) and ``"implicit"`` (the
   exact covariance never formed: perturbation-optimisation draws, Lanczos log det): wall time
   of each fit (MAP included), and the draws' marginal sds and evidence against the dense ones.
2. CoNLL-2000 chunking (``--sentences`` training sentences, all by default), CRFsuite's token
   template through ``pmc.FeatureVectorizer``, node weights (F, 23) and one transition table:
   the MAP, then ``laplace_covariance(..., "diagonal")`` (exact chain Hessian diagonal) and
   ``"lowrank"`` (``--rank`` eigenpairs): time, the peak of the memory allocated while each is
   built (``tracemalloc``, which numpy reports its arrays to) and the process's peak resident
   memory before and after, then the same for 100 draws (the draws alone are 100 x d doubles).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "PYMC_CRF_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import pymc as pm  # noqa: E402

import pymc_crf as pmc  # noqa: E402
from pymc_crf.fitters import extract_crf  # noqa: E402
from pymc_crf.fitters.bethe_laplace.curvature import fisher_vector_product  # noqa: E402
from pymc_crf.fitters.bethe_laplace.hessian import exact_fisher_matrix  # noqa: E402
from pymc_crf.fitters.covariance import inverse_pd, laplace_covariance  # noqa: E402
from pymc_crf.inference import ChainEngine  # noqa: E402
from pymc_crf.model.objective import CRFLogLikelihood, GaussianLogPrior  # noqa: E402


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # kB on Linux


def dense_model(seed: int = 0, K: int = 26, F: int = 129, N: int = 387, G: int = 45):
    """The synthetic chain CRF of part 1 (module docstring)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, 15, size=G)
    lengths = np.round(lengths * N / lengths.sum()).astype(int)
    lengths[-1] += N - lengths.sum()
    batch = pmc.GraphBatch.chains(lengths)
    X = np.concatenate([rng.random((N, F - 1)), np.ones((N, 1))], axis=1)
    W0 = rng.normal(0.0, 0.5, (F, K))
    T0 = rng.normal(0.0, 1.0, (K, K))
    y = ChainEngine().sample(batch, X @ W0, T0[None], 1, rng)[0]
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, 1.0, shape=(F, K))
        T = pm.Normal("T", 0.0, 1.0, shape=(K, K))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    return model


def map_weights(model) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = pmc.fit(model, method="map", log_likelihood=False, progressbar=False)
    spec = extract_crf(model)
    return spec.flatten({w.name: fit.posterior[w.name].values[0, 0] for w in spec.weights})


def exact_hessian(old_columns: int) -> None:
    model = dense_model()
    spec = extract_crf(model)
    lik, prior = CRFLogLikelihood(spec), GaussianLogPrior(spec)
    d = spec.flat_size
    t0 = time.perf_counter()
    w = map_weights(model)
    print(f"part 1: d = {d}, N = {spec.batch.n_total_nodes} positions in {spec.batch.n_graphs} "
          f"chains, K = {spec.n_labels}; MAP {time.perf_counter() - t0:.1f} s")
    lik(w)  # the engine's kernels loaded before timing
    t0 = time.perf_counter()
    H = exact_fisher_matrix(lik, w, lik.engine)
    t_new = time.perf_counter() - t0
    fvp = fisher_vector_product(lik, w, lik.engine)
    cols = np.random.default_rng(1).choice(d, size=min(old_columns, d), replace=False)
    t0 = time.perf_counter()
    old = np.stack([fvp(np.eye(1, d, j)[0]) for j in cols], axis=1)
    t_old_part = time.perf_counter() - t0
    t_old = t_old_part * d / cols.size
    agree = np.abs(old - H[:, cols]).max() / np.abs(H).max()
    print(f"  exact Hessian, new path: {t_new:.2f} s; previous path: {t_old_part:.2f} s for "
          f"{cols.size} columns -> {t_old:.1f} s for d (x{t_old / t_new:.0f}); the two agree to "
          f"{agree:.1e} (relative, on those columns)")
    h = 1e-5
    fd_cols = np.random.default_rng(2).choice(d, size=min(300, d), replace=False)
    fd = np.stack([-(lik(w + h * np.eye(1, d, j)[0])[1] - lik(w - h * np.eye(1, d, j)[0])[1])
                   / (2 * h) for j in fd_cols], axis=1)
    err = np.abs(fd - H[:, fd_cols]).max() / np.abs(H).max()
    print(f"  finite differences of the engine's gradient ({fd_cols.size} columns): max relative "
          f"error {err:.1e}")
    A = H + np.diag(1.0 / prior.sd**2)
    t0 = time.perf_counter()
    inverse_pd(A)
    t_chol = time.perf_counter() - t0
    t0 = time.perf_counter()
    vals, vecs = np.linalg.eigh(A)
    _ = (vecs / vals) @ vecs.T
    t_eigh = time.perf_counter() - t0
    print(f"  inverse of the precision: Cholesky {t_chol:.1f} s, eigh (before) {t_eigh:.1f} s")
    print(f"  exact covariance (Hessian + inverse): new {t_new + t_chol:.1f} s, before "
          f"{t_old + t_eigh:.1f} s")


def accuracy(ranks: list[int]) -> None:
    """Marginal standard deviations of the approximations against the exact dense covariance
    on the part-1 model at its MAP."""
    from pymc_crf.fitters.diagonal_laplace import diagonal_laplace_sd

    model = dense_model()
    spec = extract_crf(model)
    lik, prior = CRFLogLikelihood(spec), GaussianLogPrior(spec)
    w = map_weights(model)
    exact = laplace_covariance(lik, prior, w, "dense")
    sd = np.sqrt(exact.diag())
    dn = spec.node_weights.size

    def report(label, sd_a, t):
        r = sd_a / sd - 1.0
        print(f"  {label:34s} {t:6.1f} s; sd / exact sd - 1: node weights median "
              f"{np.median(np.abs(r[:dn])):.3f}, max {np.abs(r[:dn]).max():.3f}; transition "
              f"table median {np.median(np.abs(r[dn:])):.3f}, max {np.abs(r[dn:]).max():.3f}")

    print(f"part 1b: marginal sds against the exact covariance (d = {w.size})")
    old = diagonal_laplace_sd(spec, w)
    r = old[:dn] / sd[:dn] - 1.0
    print(f"  {'per-position diagonal (before)':34s}        node weights median "
          f"{np.median(np.abs(r)):.3f}, max {np.abs(r).max():.3f}; transition table kept at "
          "its MAP (sd 0)")
    t0 = time.perf_counter()
    g = laplace_covariance(lik, prior, w, "diagonal")
    report("diagonal (exact Hessian diagonal)", np.sqrt(g.diag()), time.perf_counter() - t0)
    for k in ranks:
        t0 = time.perf_counter()
        g = laplace_covariance(lik, prior, w, "lowrank", rank=k, rng=0)
        report(f"low rank {k} + diagonal", np.sqrt(g.diag()), time.perf_counter() - t0)


def conll(sentences: int | None, rank: int, at_prior_mean: bool = False,
          methods: tuple[str, ...] = ("diagonal", "lowrank")) -> None:
    from pymc_crf.datasets import data_dir, read_conll2000, token_features
    from pymc_crf.features import encode_tags, sequence_batch

    if not data_dir("conll2000").exists():
        print(f"part 2 skipped: {data_dir('conll2000')} not found")
        return
    words, pos, chunks = read_conll2000("train")
    if sentences:
        words, pos, chunks = words[:sentences], pos[:sentences], chunks[:sentences]
    vec = pmc.FeatureVectorizer(min_freq=1)
    X = vec.fit_transform([token_features(w, p) for w, p in zip(words, pos, strict=True)])
    classes = sorted({t for s in chunks for t in s})
    y, _ = encode_tags(chunks, classes)
    K, F = len(classes), X.shape[1]
    sigma = 0.5**0.5
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, sigma, shape=(F, K))
        T = pm.Normal("T", 0.0, sigma, shape=(K, K))
        pmc.CRF("y", graphs=sequence_batch(words), node_features=X, node_weights=W,
                edge_weights=T, observed=y)
    spec = extract_crf(model)
    t0 = time.perf_counter()
    w = np.zeros(spec.flat_size) if at_prior_mean else map_weights(model)
    print(f"part 2: CoNLL-2000, {len(words)} sentences, {X.shape[0]} tokens, F = {F}, K = {K}, "
          f"d = {spec.flat_size}; "
          f"{'at the prior mean' if at_prior_mean else 'MAP'} {time.perf_counter() - t0:.1f} s; peak RSS "
          f"{peak_rss_gb():.2f} GB")
    lik, prior = CRFLogLikelihood(spec), GaussianLogPrior(spec)
    for method, kw in (("diagonal", {}), ("lowrank", {"rank": rank})):
        if method not in methods:
            continue
        before = peak_rss_gb()
        tracemalloc.start()  # numpy reports its arrays to tracemalloc
        t0 = time.perf_counter()
        g = laplace_covariance(lik, prior, w, method, rng=0, **kw)
        t = time.perf_counter() - t0
        peak_build = tracemalloc.get_traced_memory()[1] / 2**30
        built = peak_rss_gb()
        tracemalloc.reset_peak()
        t1 = time.perf_counter()
        draws = g.sample(100, 0)
        t_draw = time.perf_counter() - t1
        peak_draws = tracemalloc.get_traced_memory()[1] / 2**30
        tracemalloc.stop()
        extra = ""
        if method == "lowrank":
            extra = (f"; top eigenvalues of S H S {g.lam[:3].round(1).tolist()} ... "
                     f"{g.lam[-1]:.1f}")
        print(f"  {method:9s} {t:7.1f} s, peak allocation {peak_build:.2f} GB, peak RSS "
              f"{before:.2f} -> {built:.2f} GB (100 draws {t_draw:.1f} s, peak allocation "
              f"{peak_draws:.2f} GB, peak RSS then {peak_rss_gb():.2f} GB); log det Sigma "
              f"{g.logdet():.1f}; mean sd "
              f"{np.sqrt(g.diag()).mean():.4f}{extra}")
        del draws


def fits() -> None:
    model = dense_model()
    map_weights(model)  # kernels compiled outside the timings
    print("| covariance | fit wall time (s) | log evidence | median abs. rel. error of the draws' "
          "sds vs the dense sds |")
    print("|---|---|---|---|")
    exact_sd = None
    for cov in ("exact", "implicit"):
        t0 = time.perf_counter()
        res = pmc.fit(model, method="laplace", covariance=cov, draws=200, random_seed=0,
                      log_likelihood=False, progressbar=False)
        wall = time.perf_counter() - t0
        if exact_sd is None:
            exact_sd = np.sqrt(np.diag(res["fit"]["covariance_matrix"].values))
        flat = np.concatenate([res.posterior[n].values.reshape(200, -1) for n in ("W", "T")], 1)
        # antithetic pairs: 100 independent deviations, Monte Carlo error ~ 1/sqrt(200) = 7%
        dev = flat[::2] - res["fit"]["mean_vector"].values
        err = np.median(np.abs(np.sqrt(np.mean(dev**2, axis=0)) / exact_sd - 1.0))
        print(f"| {cov} | {wall:.1f} | {res.attrs['log_marginal_likelihood']:.2f} | "
              f"{err:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--old-columns", type=int, default=200)
    ap.add_argument("--sentences", type=int, default=None)
    ap.add_argument("--rank", type=int, default=20)
    ap.add_argument("--skip-conll", action="store_true")
    ap.add_argument("--skip-dense", action="store_true")
    ap.add_argument("--at-prior-mean", action="store_true",
                    help="part 2 at the prior mean instead of the MAP (same work and memory per "
                         "product, no MAP fit)")
    ap.add_argument("--methods", nargs="+", default=["diagonal", "lowrank"])
    ap.add_argument("--accuracy", type=int, nargs="*", default=None,
                    help="only part 1b: sds of the diagonal and of low rank k + diagonal (the "
                         "ranks given) against the exact covariance")
    ap.add_argument("--fits", action="store_true",
                    help="only part 1c: pmc.fit(method='laplace') with the dense and the implicit "
                         "exact covariance")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f} (2 cores)")
    if args.fits:
        fits()
        return
    if args.accuracy is not None:
        accuracy(args.accuracy or [20, 100, 400])
        return
    if not args.skip_dense:
        exact_hessian(args.old_columns)
    if not args.skip_conll:
        conll(args.sentences, args.rank, args.at_prior_mean, tuple(args.methods))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
