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
# # Part-of-speech tagging on the Penn Treebank sample
#
# The pipeline of `conll2000_chunking.py` on NLTK's Penn Treebank WSJ sample (Marcus, Santorini &
# Marcinkiewicz 1993): 3,914 sentences, 45 POS tags. **Licence: the sample is (C) LDC, distributed
# with NLTK for non-commercial use only**; it is read from `../shared/data/ptb_sample_pos` beside
# the repository (or `$PYMC_CRF_DATA`) and never shipped with the package.
#
# Split by document (sentences of one article are correlated): section 00 (`wsj_0001`-`wsj_0099`,
# sentences 0-1920) trains, section 01 tests. Features: CRFsuite's template without the POS columns
# (the POS is the label here). MAP with a Gaussian prior (CRFsuite's L2 objective, `c2 = 1`), token
# accuracy beside python-crfsuite on the same features, then MAP vs posterior-averaged (diagonal
# Laplace) marginals: expected calibration error.
#
# `PYMC_CRF_SMOKE=1` shrinks it to a few hundred sentences; `PYMC_CRF_FIGURES=<directory>` saves
# the figure.

# %%
import os
import sys
import time

import numpy as np
import pymc as pm

import pymc_crf as pmc
from pymc_crf import plots
from pymc_crf.datasets import data_dir, read_ptb_sample, token_features
from pymc_crf.features import encode_tags, sequence_batch
from pymc_crf.fitters import extract_crf
from pymc_crf.fitters.diagonal_laplace import diagonal_laplace_draws, diagonal_laplace_sd
from pymc_crf.metrics import reliability_curve
from pymc_crf.model.predictors import averaged_marginals, crf_layout

SMOKE = os.environ.get("PYMC_CRF_SMOKE") == "1"
FIGURES = os.environ.get("PYMC_CRF_FIGURES")
SECTION_00 = 1921  # sentences of wsj_0001 .. wsj_0099 (README of the data set)
N_TRAIN, N_TEST = (300, 200) if SMOKE else (SECTION_00, None)
DRAWS = 5 if SMOKE else 30
C2 = 1.0
SIGMA = (1.0 / (2.0 * C2)) ** 0.5

if not data_dir("ptb_sample_pos").exists():
    print(f"skipped: {data_dir('ptb_sample_pos')} not found (the shared data folder beside the "
          "repository, or set PYMC_CRF_DATA)")
    sys.exit(0)


def save(fig, name):
    if FIGURES:
        fig.savefig(os.path.join(FIGURES, f"ptb_pos_{name}.png"), dpi=80)


# %%
sents, tags = read_ptb_sample()
words, wtags = sents[:N_TRAIN], tags[:N_TRAIN]
end = None if N_TEST is None else SECTION_00 + N_TEST
twords, ttags = sents[SECTION_00:end], tags[SECTION_00:end]
vec = pmc.FeatureVectorizer(min_freq=1)
X = vec.fit_transform([token_features(w) for w in words])
Xt = vec.transform([token_features(w) for w in twords])
classes = sorted({t for s in tags for t in s})
y, _ = encode_tags(wtags, classes)
yt, _ = encode_tags(ttags, classes)
K, F = len(classes), X.shape[1]
print(f"train {len(words)} sentences ({X.shape[0]} tokens), test {len(twords)} ({Xt.shape[0]} "
      f"tokens); {F} features, K = {K}; {vec.n_unseen_} unseen test feature occurrences ignored")

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
map_marg = pmc.predict(fit, test, "bpe").marginals
print(f"pymc_crf MAP token accuracy {100 * np.mean(viterbi == yt):.2f}")

# %%
try:
    from pymc_crf.features import crfsuite_fit_predict

    cs = crfsuite_fit_predict(vec, X, [len(s) for s in words], wtags, Xt,
                              [len(s) for s in twords], c2=C2)
    cs_flat = np.array([t for s in cs.tags for t in s])
    print(f"CRFsuite     token accuracy {100 * np.mean(cs_flat == np.array(classes)[yt]):.2f}")
except ImportError:
    print("python-crfsuite is not installed (the bench extra): CRFsuite comparison skipped")

# %% [markdown]
# ## Calibration: MAP vs posterior-averaged marginals

# %%
spec = extract_crf(model)
w_map = spec.flatten({"W": fit.posterior["W"].values[0, 0], "T": fit.posterior["T"].values[0, 0]})
avg_marg = averaged_marginals(test, crf_layout(spec),
                              diagonal_laplace_draws(spec, w_map, diagonal_laplace_sd(spec, w_map),
                                                     draws=DRAWS, random_seed=0))
curves = {"MAP marginals": reliability_curve(map_marg, yt),
          "posterior-averaged": reliability_curve(avg_marg, yt)}
print(f"posterior-averaged token accuracy {100 * np.mean(avg_marg.argmax(1) == yt):.2f}")
for name, r in curves.items():
    print(f"{name:20s} ECE {r.ece:.4f}")

ax = plots.plot_reliability(curves, title="PTB sample, section 01: reliability")
save(ax.figure, "reliability")
