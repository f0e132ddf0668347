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
# # Sequence classification with a hidden CRF: Japanese vowels
#
# Nine speakers each said the vowel pair /ae/ many times; every utterance is a series of 12 LPC
# cepstrum coefficients per frame (7-29 frames; Kudo, Toyama & Shimbo 1999, UCI, CC BY 4.0; it
# ships with pymc_crf). The task is to name the speaker from the whole utterance.
#
# A hidden CRF (`pmc.HCRF`) puts one class label on each chain and sums out a hidden state per
# frame (Quattoni et al. 2007; Luo, Sun & Zhao, eqs. 1-3): frame features score states, states score
# classes, and class-specific transition tables score consecutive states. We fit it by MAP and by
# the beta-process HCRF's variational EM (`method="bp_hcrf_vi"`, Luo, Sun & Zhao) and report test
# accuracy.
#
# `PYMC_CRF_SMOKE=1` runs it in seconds on a small subset; `PYMC_CRF_FIGURES=<directory>` saves the
# figures.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
import pymc as pm

import pymc_crf as pmc

SMOKE = os.environ.get("PYMC_CRF_SMOKE") == "1"
FIGURES = os.environ.get("PYMC_CRF_FIGURES")


def save(fig, name):
    """Save a figure when PYMC_CRF_FIGURES names a directory (notebooks show figures inline)."""
    if FIGURES:
        fig.savefig(os.path.join(FIGURES, f"hcrf_japanese_vowels_{name}.png"), dpi=80)


# Smoke setting: 2 utterances per speaker, 45 test utterances, 3 hidden states, short fits.
N_STATES = 3 if SMOKE else 6
MAP_ITER = 60 if SMOKE else 1000
VI = dict(rounds=2, n_restarts=1, max_iter=3, theta_maxiter=10) if SMOKE else dict()

# %% [markdown]
# ## Data
#
# `pmc.datasets.japanese_vowels()` gives the fixed train / test split as `SequenceData`: one chain
# per utterance, the 12 coefficients standardised with the training frames' mean and sd.

# %%
train, test = pmc.datasets.japanese_vowels()
if SMOKE:
    rng = np.random.default_rng(0)
    train = train.subset(np.concatenate([np.flatnonzero(train.labels == c)[:2] for c in range(9)]))
    test = test.subset(np.sort(rng.choice(test.n_graphs, size=45, replace=False)))
print(f"train: {train.n_graphs} utterances, {train.graphs.n_total_nodes} frames; "
      f"test: {test.n_graphs} utterances; {train.n_classes} speakers")

# %%
fig, axes = plt.subplots(1, 3, figsize=(10, 2.8), sharey=True)
for ax, c in zip(axes, range(3), strict=True):
    g = int(np.flatnonzero(train.labels == c)[0])
    ax.plot(train.node_features[train.graphs.node_index([g])])
    ax.set_title(f"speaker {c + 1}")
    ax.set_xlabel("frame")
axes[0].set_ylabel("LPC coefficients (standardised)")
fig.tight_layout()
save(fig, "data")

# %% [markdown]
# ## The model
#
# `theta_x` (features x states) scores each frame's hidden state, `theta_y` (states x classes) and
# `theta_e` (states x states x classes) tie states and transitions to the speaker. N(0, 1) priors.

# %%
coords = {**train.coords, "state": range(N_STATES), "state_to": range(N_STATES)}
with pm.Model(coords=coords) as model:
    tx = pm.Normal("theta_x", 0.0, 1.0, dims=("feature", "state"))
    ty = pm.Normal("theta_y", 0.0, 1.0, dims=("state", "class"))
    te = pm.Normal("theta_e", 0.0, 1.0, dims=("state", "state_to", "class"))
    pmc.HCRF("speaker", graphs=train.graphs, node_features=train.node_features,
             theta_x=tx, theta_y=ty, theta_e=te, n_states=N_STATES, n_classes=train.n_classes,
             observed=train.labels)

# %% [markdown]
# ## MAP
#
# Hidden states are exchangeable, so all-zero weights are a saddle where every state gets the same
# gradient; `jitter` starts L-BFGS from a random point instead (see the HCRF page).

# %%
fit_map = pmc.fit(model, method="map", jitter=0.5, random_seed=1, maxiter=MAP_ITER)
pred_map = pmc.predict(fit_map, test, model=model)
print(f"MAP: {int(fit_map['optimizer_result']['n_iterations'])} L-BFGS iterations, "
      f"test accuracy {1 - pred_map.error_rate:.3f}")

# %% [markdown]
# ## Beta-process HCRF by variational EM
#
# The same model with a truncated beta-process prior over which hidden states each class uses,
# fitted by mean-field variational EM with restarts (Luo, Sun & Zhao); its predictor
# (`method="bp_hcrf"`, `rule="local_z"`) scores each class with the sequence's own hidden-state
# usage fitted at test time, the global factors at their variational posterior (docs/hcrf.md).

# %%
fit_vi = pmc.fit(model, method="bp_hcrf_vi", random_seed=0, **VI)
pred_vi = pmc.predict(fit_vi, test)
print(f"BP-HCRF VI: test accuracy {1 - pred_vi.error_rate:.3f}")

# %% [markdown]
# ## Confusions
#
# Rows: true speaker; columns: predicted speaker (MAP), as fractions of each row.

# %%
confusion = np.zeros((9, 9))
np.add.at(confusion, (test.labels, pred_map.labels), 1.0)
confusion /= np.maximum(confusion.sum(axis=1, keepdims=True), 1.0)
fig, ax = plt.subplots(figsize=(4.5, 4))
im = ax.imshow(confusion, cmap="Blues", vmin=0, vmax=1)
ax.set_xticks(range(9), range(1, 10))
ax.set_yticks(range(9), range(1, 10))
ax.set_xlabel("predicted speaker")
ax.set_ylabel("true speaker")
fig.colorbar(im, ax=ax, fraction=0.046)
fig.tight_layout()
save(fig, "confusion")
plt.close("all")
