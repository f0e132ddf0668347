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
# # CoNLL-2000 chunking: a text CRF with sparse features, and calibrated marginals
#
# Shallow parsing of Wall Street Journal text (Tjong Kim Sang & Buchholz 2000): every token gets one
# of 23 BIO chunk tags. The features are sklearn-crfsuite's tutorial features (word, lower case,
# suffixes, shape, POS and its prefix, over a +-2 window), given per token as dicts the way
# sklearn-crfsuite users write them, and mapped by `pmc.FeatureVectorizer` to a sparse CSR matrix
# (about 10^5 indicator features; never densified). The model is a linear-chain CRF with a Gaussian
# prior on its weights, which is CRFsuite's L2-regularised objective (`c2 = 1 / (2 sigma^2)`).
#
# 1. MAP by `pmc.fit(method="map")`: chunk F1 (conlleval rules) and token accuracy, beside
#    python-crfsuite trained on exactly the same features and objective.
# 2. What CRFsuite cannot do: posterior-averaged marginals. A diagonal Laplace approximation around
#    the MAP (`pymc_crf.fitters.diagonal_laplace`; the full Hessian of ~2.5 million weights is out
#    of reach) gives weight uncertainty; averaging the exact chain marginals over its draws gives
#    the predictive marginals, and a reliability curve / expected calibration error compares how
#    well MAP and posterior-averaged confidences match their accuracy.
#
# The data are read from `../shared/data/conll2000` beside the repository (or `$PYMC_CRF_DATA`);
# without it the script says so and stops. `PYMC_CRF_SMOKE=1` shrinks it to a few hundred
# sentences (the tests do); `PYMC_CRF_FIGURES=<directory>` saves the figures.

# %%
import os
import sys
import time

import numpy as np
import pymc as pm

import pymc_crf as pmc
from pymc_crf import plots
from pymc_crf.datasets import data_dir, read_conll2000, token_features
from pymc_crf.features import encode_tags, sequence_batch
from pymc_crf.fitters import extract_crf
from pymc_crf.fitters.diagonal_laplace import diagonal_laplace_draws, diagonal_laplace_sd
from pymc_crf.metrics import chunk_f1, reliability_curve
from pymc_crf.model.predictors import averaged_marginals, crf_layout

SMOKE = os.environ.get("PYMC_CRF_SMOKE") == "1"
FIGURES = os.environ.get("PYMC_CRF_FIGURES")
N_TRAIN, N_TEST = (300, 200) if SMOKE else (None, None)
DRAWS = 5 if SMOKE else 30
C2 = 1.0  # CRFsuite's L2 coefficient: objective -log L + c2 ||w||^2
SIGMA = (1.0 / (2.0 * C2)) ** 0.5

if not data_dir("conll2000").exists():
    print(f"skipped: {data_dir('conll2000')} not found (the shared data folder beside the "
          "repository, or set PYMC_CRF_DATA)")
    sys.exit(0)


def save(fig, name):
    if FIGURES:
        fig.savefig(os.path.join(FIGURES, f"conll2000_chunking_{name}.png"), dpi=80)


def split(flat, lengths):
    """A flat list cut into consecutive pieces of the given lengths."""
    out, i = [], 0
    for n in lengths:
        out.append(list(flat[i:i + n]))
        i += n
    return out


# %% [markdown]
# ## Features
#
# Per-token dicts from the template, then one CSR matrix for all training tokens; the test tokens
# use the training columns, and features never seen in training are ignored (and counted).

# %%
words, pos, chunks = (a[:N_TRAIN] for a in read_conll2000("train"))
twords, tpos, tchunks = (a[:N_TEST] for a in read_conll2000("test"))
vec = pmc.FeatureVectorizer(min_freq=1)
X = vec.fit_transform([token_features(w, p) for w, p in zip(words, pos, strict=True)])
Xt = vec.transform([token_features(w, p) for w, p in zip(twords, tpos, strict=True)])
classes = sorted({t for s in chunks + tchunks for t in s})
y, _ = encode_tags(chunks, classes)
yt, _ = encode_tags(tchunks, classes)
K, F = len(classes), X.shape[1]
print(f"{len(words)} training sentences, {X.shape[0]} tokens, {F} features ({X.nnz} non-zeros), "
      f"K = {K}; test: {Xt.shape[0]} tokens, {vec.n_unseen_} unseen feature occurrences ignored")

# %% [markdown]
# ## MAP (the CRFsuite objective)

# %%
with pm.Model() as model:
    W = pm.Normal("W", 0.0, SIGMA, shape=(F, K))
    T = pm.Normal("T", 0.0, SIGMA, shape=(K, K))
    pmc.CRF("y", graphs=sequence_batch(words), node_features=X, node_weights=W, edge_weights=T,
            observed=y)
t0 = time.perf_counter()
fit = pmc.fit(model, method="map", ftol=1e-6, gtol=1e-5, log_likelihood=False)
print(f"MAP: {time.perf_counter() - t0:.1f} s, {int(fit.optimizer_result.n_iterations)} "
      "L-BFGS iterations")

test = pmc.CRFData(sequence_batch(twords), yt, Xt, n_labels=K)
viterbi = pmc.predict(fit, test, "map").labels
map_marg = pmc.predict(fit, test, "bpe").marginals  # marginals at the MAP weights
pred_tags = split([classes[i] for i in viterbi], [len(s) for s in twords])
score = chunk_f1(tchunks, pred_tags)
rows = {"pymc_crf MAP": (score.f1, 100 * np.mean(viterbi == yt))}

# %% [markdown]
# ## CRFsuite on the same features and objective
#
# python-crfsuite reads the same columns back (`FeatureVectorizer.inverse_transform`); with
# `possible_states` / `possible_transitions` it has a weight for every attribute x label and label
# x label pair, as the model above.

# %%
try:
    from pymc_crf.features import crfsuite_fit_predict

    cs = crfsuite_fit_predict(vec, X, [len(s) for s in words], chunks, Xt,
                              [len(s) for s in twords], c2=C2)
    cs_flat = np.array([classes.index(t) for s in cs.tags for t in s])
    rows["CRFsuite"] = (chunk_f1(tchunks, cs.tags).f1, 100 * np.mean(cs_flat == yt))
except ImportError:
    print("python-crfsuite is not installed (the bench extra): CRFsuite comparison skipped")
for name, (f1, acc) in rows.items():
    print(f"{name:14s} chunk F1 {f1:6.2f}   token accuracy {acc:6.2f}")

# %% [markdown]
# ## Posterior-averaged marginals and their calibration
#
# The diagonal Laplace approximation: for each node weight, posterior precision = prior precision +
# the per-token Fisher information at the MAP (its exact Hessian diagonal when positions are
# independent; here it neglects the correlations along each sentence); the shared transition table
# stays at its MAP. Then the exact chain marginals of the test sentences averaged over draws.

# %%
spec = extract_crf(model)
w_map = spec.flatten({"W": fit.posterior["W"].values[0, 0], "T": fit.posterior["T"].values[0, 0]})
sd = diagonal_laplace_sd(spec, w_map)
avg_marg = averaged_marginals(test, crf_layout(spec),
                              diagonal_laplace_draws(spec, w_map, sd, draws=DRAWS, random_seed=0))
avg_labels = avg_marg.argmax(axis=1)
avg_tags = split([classes[i] for i in avg_labels], [len(s) for s in twords])
rows["posterior average"] = (chunk_f1(tchunks, avg_tags).f1, 100 * np.mean(avg_labels == yt))

curves = {"MAP marginals": reliability_curve(map_marg, yt, n_bins=10),
          "posterior-averaged": reliability_curve(avg_marg, yt, n_bins=10)}
for name, marg in (("MAP marginals", map_marg), ("posterior-averaged", avg_marg)):
    nll = -np.mean(np.log(np.clip(marg[np.arange(yt.size), yt], 1e-300, None)))
    print(f"{name:20s} ECE {curves[name].ece:.4f}   test log loss per token {nll:.4f}")
print(f"posterior average: chunk F1 {rows['posterior average'][0]:.2f}, token accuracy "
      f"{rows['posterior average'][1]:.2f} (max-marginal labels, {DRAWS} draws)")

# %%
ax = plots.plot_reliability(curves, title="CoNLL-2000 test tokens: reliability")
save(ax.figure, "reliability")
