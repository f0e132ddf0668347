# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # When does the posterior pay off? CoNLL-2000 chunking with learned prior scales
#
# A CRF trained by MAP at CRFsuite's default prior (`c2 = 1`, every weight N(0, 1/2)) gives
# marginals that are already well calibrated on CoNLL-2000 at full size. Averaging over a
# posterior at that same fixed prior makes them *worse* (under-confident: the prior is far wider
# than what the data leave of most feature weights). This example shows what changes when the
# prior itself is learned, the PyMC way: one scale per feature template,
# `s ~ HalfNormal(1)`, `W ~ Normal(0, s[template])`, fitted by `pmc.fit(method="laplace")` (type-II
# maximum likelihood of the scales by the Laplace evidence, then the Laplace posterior at them).
#
# For each training-set size it compares, on the same test sentences:
#
# 1. **MAP, c2 = 1**: CRFsuite's objective;
# 2. **MAP, temperature-scaled**: the same weights divided by one temperature fitted on a dev split
#    (`pmc.calibration`: the non-Bayesian fix a careful user would try);
# 3. **MAP at the learned scales**: the posterior mean of the Laplace fit, used as a point;
# 4. **learned-scale posterior**: marginals averaged over its posterior draws.
#
# and reports token log loss, expected calibration error (ECE), chunk F1, span (chunk)
# confidence and accuracy against coverage, then runs a small active-learning loop.
#
# The data are read from `../shared/data/conll2000` beside the repository (or `$PYMC_CRF_DATA`);
# without it the script says so and stops. `PYMC_CRF_SMOKE=1` runs one small size (60 training
# sentences; the tests and the docs build do); `PYMC_CRF_FIGURES=<directory>` saves the figures.

# %%
import os
import sys
import time
import warnings

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pymc as pm

import pymc_crf as pmc
from pymc_crf import plots
from pymc_crf.calibration import fit_temperature, tempered, token_log_loss
from pymc_crf.datasets import data_dir, read_conll2000, token_features
from pymc_crf.features import encode_tags, sequence_batch
from pymc_crf.metrics import chunk_f1, reliability_curve

SMOKE = os.environ.get("PYMC_CRF_SMOKE") == "1"
FIGURES = os.environ.get("PYMC_CRF_FIGURES")
SIZES = (60,) if SMOKE else (100, 300, 1000)
N_DEV = 60 if SMOKE else 500      # the dev split: the last sentences of the training file
N_TEST = 150 if SMOKE else 2012   # the first test sentences (2012: all)
DRAWS = 5 if SMOKE else 30
SIGMA = 0.5**0.5                  # CRFsuite's c2 = 1 as a Gaussian prior

if not data_dir("conll2000").exists():
    print(f"skipped: {data_dir('conll2000')} not found (the shared data folder beside the "
          "repository, or set PYMC_CRF_DATA)")
    sys.exit(0)
warnings.filterwarnings("ignore", category=FutureWarning)


def save(fig, name):
    if FIGURES:
        fig.savefig(os.path.join(FIGURES, f"conll2000_posterior_{name}.png"), dpi=80)


words, pos, chunks = read_conll2000("train")
twords, tpos, tchunks = (a[:N_TEST] for a in read_conll2000("test"))
dwords, dpos, dchunks = (a[-N_DEV:] for a in (words, pos, chunks))
classes = sorted({t for s in chunks + tchunks for t in s})
K = len(classes)
print(f"{len(words)} training sentences available, dev {N_DEV}, test {len(twords)}; K = {K}")


def split(flat, lengths):
    out, i = [], 0
    for n in lengths:
        out.append(list(flat[i:i + n]))
        i += n
    return out


def data_for(vec, w, p, c):
    X = vec.transform([token_features(a, b) for a, b in zip(w, p, strict=True)])
    y, _ = encode_tags(c, classes)
    return pmc.CRFData(sequence_batch(w), y, X, n_labels=K)


def map_model(vec, X, y, batch):
    F = X.shape[1]
    with pm.Model() as model:
        W = pm.Normal("W", 0.0, SIGMA, shape=(F, K))
        T = pm.Normal("T", 0.0, SIGMA, shape=(K, K))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    return model


def learned_scale_model(vec, X, y, batch):
    """One scale per feature template for the node weights, one for the transitions."""
    F = X.shape[1]
    with pm.Model() as model:
        s = pm.HalfNormal("s", 1.0, shape=len(vec.templates_))
        W = pm.Normal("W", 0.0, s[vec.template_index_][:, None], shape=(F, K))
        t = pm.HalfNormal("t", 1.0)
        T = pm.Normal("T", 0.0, t, shape=(K, K))
        pmc.CRF("y", graphs=batch, node_features=X, node_weights=W, edge_weights=T, observed=y)
    return model


def scores(marg, labels, test):
    tags = split([classes[i] for i in labels], [len(s) for s in twords])
    return {"log loss": token_log_loss(marg, test.labels),
            "ECE": reliability_curve(marg, test.labels, n_bins=10).ece,
            "accuracy": float(np.mean(marg.argmax(1) == test.labels)),
            "chunk F1": chunk_f1(tchunks, tags).f1}


# %% [markdown]
# ## MAP, temperature-scaled MAP, learned scales: one table per training size

# %%
rows, fits = [], {}
for n in SIZES:
    tw, tp, tc = words[:n], pos[:n], chunks[:n]
    vec = pmc.FeatureVectorizer(min_freq=1)
    X = vec.fit_transform([token_features(a, b) for a, b in zip(tw, tp, strict=True)])
    y, _ = encode_tags(tc, classes)
    batch = sequence_batch(tw)
    test, dev = data_for(vec, twords, tpos, tchunks), data_for(vec, dwords, dpos, dchunks)

    t0 = time.perf_counter()
    fit_map = pmc.fit(map_model(vec, X, y, batch), method="map", log_likelihood=False,
                      progressbar=False)
    t_map = time.perf_counter() - t0
    temperature = fit_temperature(fit_map, dev)
    t0 = time.perf_counter()
    fit_ls = pmc.fit(learned_scale_model(vec, X, y, batch), method="laplace", draws=DRAWS,
                     random_seed=0, progressbar=False)
    t_ls = time.perf_counter() - t0
    fits[n] = (fit_map, temperature, fit_ls, test)

    viterbi = pmc.predict(fit_map, test, "map").labels
    ls_point = pmc.predict(fit_ls, test, "bpe")
    ls_avg = pmc.predict(fit_ls, test, "average", draws=DRAWS, random_seed=0)
    for name, marg, labels, wall in (
            ("MAP, c2 = 1", pmc.predict(fit_map, test, "bpe").marginals, viterbi, t_map),
            (f"MAP, T = {temperature:.2f}",
             pmc.predict(tempered(fit_map, temperature), test, "bpe").marginals, viterbi, t_map),
            ("MAP at learned scales", ls_point.marginals, pmc.predict(fit_ls, test, "map").labels,
             t_ls),
            ("learned-scale posterior", ls_avg.marginals, ls_avg.marginals.argmax(1), t_ls)):
        rows.append({"train sentences": n, "method": name, **scores(marg, labels, test),
                     "fit s": wall})
    scales = fit_ls["posterior"]["s"].values[0, 0]
    print(f"n = {n}: {X.shape[1]} features; learned template scales "
          f"{ {k: round(float(v), 3) for k, v in zip(vec.templates_, scales, strict=True)} }, "
          "transition scale "
          f"{float(fit_ls['posterior']['t'].values[0, 0]):.3f}")

table = pd.DataFrame(rows).set_index(["train sentences", "method"])
with pd.option_context("display.float_format", "{:.4f}".format, "display.width", 160,
                       "display.max_columns", None):
    print(table)

# %% [markdown]
# ## Reliability of the token marginals (largest size)

# %%
n = SIZES[-1]
fit_map, temperature, fit_ls, test = fits[n]
curves = {"MAP, c2 = 1": reliability_curve(pmc.predict(fit_map, test, "bpe").marginals,
                                           test.labels),
          "MAP, temperature-scaled": reliability_curve(
              pmc.predict(tempered(fit_map, temperature), test, "bpe").marginals, test.labels),
          "learned-scale posterior": reliability_curve(
              pmc.predict(fit_ls, test, "average", draws=DRAWS, random_seed=0).marginals,
              test.labels)}
ax = plots.plot_reliability(curves, title=f"CoNLL-2000 test tokens ({n} training sentences)")
save(ax.figure, "reliability")

# %% [markdown]
# ## Span confidence: is a predicted chunk exactly right?
#
# `pmc.queries.span_probabilities` gives each predicted chunk the probability that it is a gold
# chunk (constrained forward-backward, averaged over the posterior draws); its ECE measures how
# well these chunk-level confidences are calibrated.

# %%
span_rows = []
for name, res in (("MAP, c2 = 1", fit_map), ("MAP, temperature-scaled", tempered(fit_map, temperature)),
                  ("learned-scale posterior", fit_ls)):
    sp = pmc.queries.span_probabilities(res, test, classes, draws=DRAWS)
    rel = sp.reliability(10)
    span_rows.append({"method": name, "spans": len(sp.probability),
                      "span ECE": rel.ece, "mean confidence": float(np.mean(sp.probability)),
                      "fraction correct": float(np.mean(sp.correct))})
print(pd.DataFrame(span_rows).set_index("method").to_string(float_format="{:.4f}".format))

# %% [markdown]
# ## Accuracy against coverage: abstaining on the least confident tokens

# %%
fig, ax = plt.subplots(figsize=(5, 3.5))
for name, res in (("MAP, c2 = 1", fit_map), ("learned-scale posterior", fit_ls)):
    curve = pmc.queries.selective_prediction(res, test, draws=DRAWS)
    ax.plot(curve.coverage, curve.accuracy, label=f"{name} (area {curve.area:.4f})")
ax.set_xlabel("coverage")
ax.set_ylabel("token accuracy")
ax.legend(fontsize=8)
save(fig, "coverage")

# %% [markdown]
# ## Active learning: which sentences to label next
#
# Start from the first sentences, then add batches chosen from a pool by BALD (where the
# posterior draws disagree), by the MAP's entropy, or at random, refitting after each batch.

# %%
START, BATCH, ROUNDS, POOL = (20, 10, 1, 60) if SMOKE else (100, 50, 4, 2000)
pool_w, pool_p, pool_c = (a[START:START + POOL] for a in (words, pos, chunks))
curves_al = {}
for strategy in ("bald", "entropy", "random"):
    chosen = list(range(START))
    accs = []
    for r in range(ROUNDS + 1):
        tw = [words[i] if i < START else pool_w[i - START] for i in chosen]
        tp = [pos[i] if i < START else pool_p[i - START] for i in chosen]
        tc = [chunks[i] if i < START else pool_c[i - START] for i in chosen]
        vec = pmc.FeatureVectorizer(min_freq=1)
        X = vec.fit_transform([token_features(a, b) for a, b in zip(tw, tp, strict=True)])
        y, _ = encode_tags(tc, classes)
        model = learned_scale_model(vec, X, y, sequence_batch(tw))
        res = pmc.fit(model, method="laplace", draws=DRAWS, random_seed=0, progressbar=False)
        test_r = data_for(vec, twords, tpos, tchunks)
        accs.append(float(np.mean(pmc.predict(res, test_r, "average", draws=DRAWS,
                                              random_seed=0).marginals.argmax(1)
                                  == test_r.labels)))
        if r == ROUNDS:
            break
        left = [i for i in range(POOL) if START + i not in chosen]
        pool = data_for(vec, [pool_w[i] for i in left], [pool_p[i] for i in left],
                        [pool_c[i] for i in left])
        pick = pmc.queries.select_for_labelling(res, pool, BATCH, strategy, draws=DRAWS,
                                                random_seed=r)
        chosen += [START + left[i] for i in pick]
    curves_al[strategy] = accs
sizes = [START + BATCH * r for r in range(ROUNDS + 1)]
print(pd.DataFrame(curves_al, index=pd.Index(sizes, name="labelled sentences"))
      .to_string(float_format="{:.4f}".format))
fig, ax = plt.subplots(figsize=(5, 3.5))
for strategy, accs in curves_al.items():
    ax.plot(sizes, accs, marker="o", label=strategy)
ax.set_xlabel("labelled sentences")
ax.set_ylabel("test token accuracy")
ax.legend()
save(fig, "active_learning")
