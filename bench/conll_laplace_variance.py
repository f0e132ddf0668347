"""Why the diagonal Laplace approximation flattens the CoNLL-2000 marginals: a token's score
variance under the diagonal approximation against the full Laplace approximation.

The chunking CRF of ``examples/conll2000_chunking.py`` (CRFsuite's feature template and L2
objective as a N(0, 1/2) prior) is fitted by MAP on the first ``--train`` sentences. The full
Laplace approximation is N(w_MAP, A^-1) with A the negative log-posterior Hessian at the MAP,
``A v = J^T Cov(J v) + v / sigma^2`` (J: weights -> log-potential tables; Cov: the chain's
sufficient-statistic covariance, ``ChainEngine.covariance_vector_product``). For ``--tokens``
random test tokens i, their best label k and runner-up k', the score ``s_ik = x_i . W[:, k]`` and
the margin ``s_ik - s_ik'`` (what the softmax sees) have variance ``u^T A^-1 u`` (``u`` the
weight-space direction), solved here by conjugate gradients with A never formed, against the
diagonal approximation's ``sum_j x_ij^2 (sd_jk^2 [+ sd_jk'^2])``.

With ``--evidence-prior``, instead: the prior variance of the node weights chosen by evidence
(MacKay 1992's fixed point ``sigma^2 <- ||W||^2 / gamma``, ``gamma = sum_j (1 - var_j / sigma^2)``
with the diagonal Laplace variances), refitting the MAP at each step, and the accuracy and
expected calibration error of the MAP and the posterior-averaged marginals (5 draws) of the
first ``--test`` test sentences at each prior.

Run:  .venv/bin/python bench/conll_laplace_variance.py [--train 300] [--tokens 20]
      .venv/bin/python bench/conll_laplace_variance.py --evidence-prior [--steps 6]
(needs ../shared/data/conll2000)
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import pymc as pm

import pymc_crf as pmc
from pymc_crf.datasets import data_dir, read_conll2000, token_features
from pymc_crf.features import encode_tags, sequence_batch
from pymc_crf.fitters import extract_crf
from pymc_crf.fitters.bethe_laplace.hessian import CurvatureOperator
from pymc_crf.fitters.covariance import ImplicitGaussian
from pymc_crf.fitters.diagonal_laplace import diagonal_laplace_draws, diagonal_laplace_sd
from pymc_crf.metrics import reliability_curve
from pymc_crf.model.objective import CRFLogLikelihood, GaussianLogPrior
from pymc_crf.model.predictors import averaged_marginals, crf_layout

C2 = 1.0
SIGMA = (1.0 / (2.0 * C2)) ** 0.5


def _map_fit(words, X, y, K, sigma_w):
    """The chunking CRF with N(0, sigma_w^2) node weights and CRFsuite's table prior, its MAP
    fit, spec and flat MAP weights."""
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, sigma_w, shape=(X.shape[1], K))
        T = pm.Normal("T", 0.0, SIGMA, shape=(K, K))
        pmc.CRF("y", graphs=sequence_batch(words), node_features=X, node_weights=W,
                edge_weights=T, observed=y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = pmc.fit(model, method="map", ftol=1e-6, gtol=1e-5, log_likelihood=False,
                      progressbar=False)
    spec = extract_crf(model)
    w_map = spec.flatten({"W": fit.posterior["W"].values[0, 0],
                          "T": fit.posterior["T"].values[0, 0]})
    return fit, spec, w_map


def evidence_prior(words, X, y, K, test, steps: int) -> None:
    """MacKay's fixed point for the node weights' prior variance, with the MAP and averaged
    predictions' accuracy and ECE at each step."""
    F, s2 = X.shape[1], SIGMA**2
    print("| prior variance | gamma | next variance | MAP accuracy | MAP ECE | averaged accuracy "
          "| averaged ECE |")
    print("|---|---|---|---|---|---|---|")
    for _ in range(steps):
        fit, spec, w_map = _map_fit(words, X, y, K, s2**0.5)
        sd = diagonal_laplace_sd(spec, w_map)
        gamma = float(np.sum(1.0 - sd[:F * K] ** 2 / s2))
        nxt = float(np.sum(w_map[:F * K] ** 2)) / gamma
        cells = []
        for marg in (pmc.predict(fit, test, "bpe").marginals,
                     averaged_marginals(test, crf_layout(spec),
                                        diagonal_laplace_draws(spec, w_map, sd, draws=5,
                                                               random_seed=0))):
            cells += [f"{np.mean(marg.argmax(1) == test.labels):.4f}",
                      f"{reliability_curve(marg, test.labels, n_bins=10).ece:.3f}"]
        print(f"| {s2:.4f} | {gamma:.0f} | {nxt:.4f} | " + " | ".join(cells) + " |")
        s2 = nxt


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, default=300)
    ap.add_argument("--test", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=20)
    ap.add_argument("--evidence-prior", action="store_true")
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args(argv)
    if not data_dir("conll2000").exists():
        print(f"skipped: {data_dir('conll2000')} not found")
        return
    words, pos, chunks = (a[:args.train] for a in read_conll2000("train"))
    twords, tpos, tchunks = (a[:args.test] for a in read_conll2000("test"))
    vec = pmc.FeatureVectorizer(min_freq=1)
    X = vec.fit_transform([token_features(w, p) for w, p in zip(words, pos, strict=True)])
    Xt = vec.transform([token_features(w, p) for w, p in zip(twords, tpos, strict=True)])
    classes = sorted({t for s in chunks + tchunks for t in s})
    y, _ = encode_tags(chunks, classes)
    yt, _ = encode_tags(tchunks, classes)
    K, F = len(classes), X.shape[1]
    if args.evidence_prior:
        evidence_prior(words, X, y, K, pmc.CRFData(sequence_batch(twords), yt, Xt, n_labels=K),
                       args.steps)
        return
    fit, spec, w_map = _map_fit(words, X, y, K, SIGMA)
    lik, prior = CRFLogLikelihood(spec), GaussianLogPrior(spec)
    d = w_map.size
    print(f"{args.train} sentences, {X.shape[0]} tokens, {F} features, K = {K}: {d} weights")
    # the exact Laplace covariance as an operator: A^{-1} u by preconditioned conjugate
    # gradients on blocks of Hessian-vector products, A never formed
    gauss = ImplicitGaussian(CurvatureOperator(lik, w_map), prior.sd, tol=1e-8, maxiter=5000)
    sd = diagonal_laplace_sd(spec, w_map)
    sd_W = sd[:F * K].reshape(F, K)
    W_map = w_map[:F * K].reshape(F, K)
    scores = np.asarray(Xt @ W_map)
    rng = np.random.default_rng(0)
    picks = rng.choice(Xt.shape[0], size=args.tokens, replace=False)
    rows, U = [], []
    for i in picks:
        k, k2 = (int(c) for c in np.argsort(scores[i])[::-1][:2])
        x = Xt[i].toarray().ravel()
        row = [int(x.astype(bool).sum())]
        # the score of the MAP label, and its margin over the runner-up (what the softmax sees)
        for cols in ({k: 1.0}, {k: 1.0, k2: -1.0}):
            u = np.zeros(d)
            for c, sign in cols.items():
                u[:F * K].reshape(F, K)[:, c] = sign * x
            U.append(u)
            row += [float(sum(np.sum(x**2 * sd_W[:, c] ** 2) for c in cols)), 0.0]
        rows.append(row)
    t0 = time.perf_counter()
    U = np.stack(U, axis=1)
    full = np.einsum("ij,ij->j", U, gauss.matvec(U)).reshape(-1, 2)
    for row, (f1, f2) in zip(rows, full, strict=True):
        row[2], row[4] = float(f1), float(f2)
    print(f"{args.tokens} test tokens, one blocked CG solve in {time.perf_counter() - t0:.1f} s "
          f"({gauss.iterations[-1]} iterations; converged: "
          f"{gauss.iterations[-1] < gauss.maxiter})")
    r = np.array(rows, dtype=float)
    print("| active features | score: diagonal var | score: full var | margin: diagonal var "
          "| margin: full var | margin: diagonal / full |")
    print("|---|---|---|---|---|---|")
    for a, d1, f1, d2, f2 in rows:
        print(f"| {a:.0f} | {d1:.3f} | {f1:.3f} | {d2:.3f} | {f2:.3f} | {d2 / f2:.1f} |")
    for name, (a, b) in (("score", (1, 2)), ("margin", (3, 4))):
        ratio = r[:, a] / r[:, b]
        print(f"{name}: diagonal / full variance median {np.median(ratio):.2f} (range "
              f"{ratio.min():.2f}-{ratio.max():.2f}); sd diagonal {np.sqrt(r[:, a]).mean():.2f}, "
              f"full {np.sqrt(r[:, b]).mean():.2f} on average")


if __name__ == "__main__":
    main()
