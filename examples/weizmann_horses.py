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
# # Figure/ground segmentation of the Weizmann horses with a grid CRF
#
# The Weizmann horse database (Borenstein & Ullman 2002): 328 photographs of horses with a
# hand-made horse / background mask each. **Licence: research benchmarking only, not
# redistributed**; it is read from `../shared/data/weizmann_horses` beside the repository (or
# `$PYMC_CRF_DATA`) and never shipped with the package.
#
# Each image is downscaled to a 20 x 26 grid of pixels, one node per pixel, 4-connected. Node
# features: colour, local colour statistics, gradient, position (horses are photographed roughly
# centred); edge features: a bias and the contrast-sensitive term `exp(-beta ||c_i - c_j||^2)` of
# interactive segmentation (Boykov & Jolly 2001), so that label changes are cheap across colour
# edges. Each edge feature has its own (2, 2) weight table, so every edge has its own potential.
#
# The grids have treewidth 20, so the likelihood uses the Bethe approximation (loopy BP). One
# fit, Bethe-Laplace (`method="bethe_laplace"`, `map="bp"`: a Gaussian at the MAP of the Bethe
# likelihood with the linear-response covariance; Welling & Parise 2006), gives both the MAP
# prediction (BP marginals at its centre) and posterior-averaged pixel marginals (BP marginals
# averaged over its draws). Pixel accuracy, calibration and a picture of the result.
#
# `PYMC_CRF_SMOKE=1` shrinks it to a few images at half the resolution; `PYMC_CRF_FIGURES=<directory>`
# saves the figures.

# %%
import os
import sys
import time

import matplotlib.pyplot as plt
import numpy as np
import pymc as pm
from PIL import Image

import pymc_crf as pmc
from pymc_crf.datasets import data_dir
from pymc_crf.inference import BeliefPropagation
from pymc_crf.metrics import expected_calibration_error, reliability_curve

SMOKE = os.environ.get("PYMC_CRF_SMOKE") == "1"
FIGURES = os.environ.get("PYMC_CRF_FIGURES")
ROWS, COLS = (10, 13) if SMOKE else (20, 26)
N_TRAIN, N_TEST = (6, 4) if SMOKE else (20, 20)
DRAWS = 20 if SMOKE else 100
FOLDER = data_dir("weizmann_horses")

if not (FOLDER / "mask_png").exists():
    print(f"skipped: {FOLDER} not found (the shared data folder beside the repository, or set "
          "PYMC_CRF_DATA)")
    sys.exit(0)


def save(fig, name):
    """Save a figure when PYMC_CRF_FIGURES names a directory (notebooks show figures inline)."""
    if FIGURES:
        fig.savefig(os.path.join(FIGURES, f"weizmann_horses_{name}.png"), dpi=80)


# %% [markdown]
# ## Images, masks and a fixed split
#
# A random split by image (seed 0; the database has no official one). Colour images come from
# `rgb_resized`, except `horse318`, whose colour original is blank (the data set's README): its
# grey image is used for all three channels. Masks are averaged down to the grid and thresholded
# at 1/2.

# %%
def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """RGB in [0, 1] of shape (ROWS, COLS, 3) and the 0/1 mask (ROWS, COLS) of one image."""
    if name == "horse318":
        grey = Image.open(FOLDER / "gray" / f"{name}.jpg").convert("L").convert("RGB")
    else:
        grey = Image.open(FOLDER / "rgb_resized" / f"{name}.jpg").convert("RGB")
    rgb = np.asarray(grey.resize((COLS, ROWS), Image.Resampling.BOX), dtype=float) / 255.0
    mask = Image.open(FOLDER / "mask_png" / f"{name}.png").convert("L")
    frac = np.asarray(mask.resize((COLS, ROWS), Image.Resampling.BOX), dtype=float) / 255.0
    return rgb, (frac >= 0.5).astype(np.int64)


names = sorted(p.stem for p in (FOLDER / "mask_png").glob("horse*.png"))
order = np.random.default_rng(0).permutation(len(names))
train_names = [names[i] for i in order[:N_TRAIN]]
test_names = [names[i] for i in order[N_TRAIN:N_TRAIN + N_TEST]]
train_images = [load(n) for n in train_names]
test_images = [load(n) for n in test_names]
print(f"{len(names)} images; train {N_TRAIN}, test {N_TEST}, grid {ROWS} x {COLS}; "
      f"horse pixels: train {np.mean([m.mean() for _, m in train_images]):.3f}, "
      f"test {np.mean([m.mean() for _, m in test_images]):.3f}")


# %% [markdown]
# ## Features
#
# Per pixel: RGB, grey level and its square, the mean and standard deviation of the grey level in
# 3 x 3 and 7 x 7 windows, the gradient magnitude, and the position (row, column, their squares,
# the squared distance from the centre); standardised with the training statistics, plus a bias
# column. Per edge: a bias and `exp(-beta ||c_i - c_j||^2)` with `beta = 1 / (2 mean ||c_i -
# c_j||^2)` over the training edges.

# %%
def box(img: np.ndarray, k: int) -> np.ndarray:
    """Mean over a k x k window (edges padded by reflection)."""
    pad = np.pad(img, k // 2, mode="reflect")
    out = np.zeros_like(img)
    for di in range(k):
        for dj in range(k):
            out += pad[di:di + img.shape[0], dj:dj + img.shape[1]]
    return out / k**2


def node_features(rgb: np.ndarray) -> np.ndarray:
    grey = rgb.mean(axis=2)
    gy, gx = np.gradient(grey)
    yy, xx = np.meshgrid(np.linspace(-1, 1, ROWS), np.linspace(-1, 1, COLS), indexing="ij")
    cols = [rgb[..., 0], rgb[..., 1], rgb[..., 2], grey, grey**2, np.hypot(gx, gy),
            yy, xx, yy**2, xx**2, yy**2 + xx**2]
    for k in (3, 7):
        m = box(grey, k)
        cols += [m, np.sqrt(np.maximum(box(grey**2, k) - m**2, 0.0))]
    return np.stack([c.ravel() for c in cols], axis=1)


def colour_gaps(batch: pmc.GraphBatch, colours: np.ndarray) -> np.ndarray:
    """||c_i - c_j||^2 per edge of ``batch`` (``colours`` per global node)."""
    return ((colours[batch.edges[:, 0]] - colours[batch.edges[:, 1]]) ** 2).sum(axis=1)


def crf_data(images, mean=None, sd=None, beta=None):
    batch = pmc.GraphBatch.grid(ROWS, COLS, n_graphs=len(images))
    X = np.concatenate([node_features(rgb) for rgb, _ in images])
    colours = np.concatenate([rgb.reshape(-1, 3) for rgb, _ in images])
    gaps = colour_gaps(batch, colours)
    if mean is None:
        mean, sd, beta = X.mean(axis=0), X.std(axis=0), 1.0 / (2.0 * gaps.mean())
    X = np.column_stack([(X - mean) / sd, np.ones(len(X))])
    Xe = np.column_stack([np.ones(len(gaps)), np.exp(-beta * gaps)])
    labels = np.concatenate([m.ravel() for _, m in images])
    data = pmc.CRFData(batch, labels, node_features=X, edge_features=Xe, n_labels=2)
    return data, (mean, sd, beta)


train, stats = crf_data(train_images)
test, _ = crf_data(test_images, *stats)
print(f"node features {train.node_features.shape}, edge features {train.edge_features.shape}")

# %% [markdown]
# ## The model: a grid CRF with a Bethe likelihood
#
# Node weights W (F, 2) with N(0, 1) priors and one (2, 2) table per edge feature; log Z and its
# gradient come from loopy belief propagation (the Bethe free energy). The sequential schedule
# without damping converges in about a fifth of the sweeps of the default (parallel, damping 0.5)
# on these grids; BP warns when it does not converge.
#
# The edge tables get a tighter prior, N(0, 0.5^2): large regions of one label pull the MAP
# towards strong couplings, where loopy BP has several fixed points. With N(0, 1) on them (60
# training images of 30 x 40) the Hessian at the Bethe MAP was not positive definite, so the
# Laplace approximation did not exist there.

# %%
BP = BeliefPropagation(schedule="sequential", damping=0.0, tol=1e-10, max_iter=2000)

with pm.Model(coords=train.coords) as model:
    W = pm.Normal("W", 0.0, 1.0, dims=("node_feature", "node_label"))
    V = pm.Normal("V", 0.0, 0.5, dims=("edge_feature", "label_i", "label_j"))
    pmc.CRF("y", graphs=train.graphs, node_features=train.node_features, node_weights=W,
            edge_features=train.edge_features, edge_weights=V, observed=train.labels,
            inference=BP, dims=("graph", "position"))

# %% [markdown]
# ## Bethe-Laplace
#
# `map="bp"` maximises the penalised Bethe log-likelihood (the objective of `method="map"`
# with this model) and puts a Gaussian there whose precision is the prior's plus the
# linear-response covariance of the features (Welling & Parise 2006, eqs. (8)-(12)). Its centre
# is the MAP, so the plug-in prediction at the centre is the MAP prediction.

# %%
t0 = time.perf_counter()
fit_bl = pmc.fit(model, method="bethe_laplace", map="bp", bp=BP, draws=DRAWS, random_seed=0)
t_bl = time.perf_counter() - t0
print(f"Bethe-Laplace {t_bl:.1f} s; BP converged at the MAP: "
      f"{bool(fit_bl['diagnostics']['bp_converged'])}")
print("edge tables, posterior mean of the draws (bias, contrast):")
print(np.round(fit_bl["posterior"]["V"].values.mean(axis=(0, 1)), 2))

# %% [markdown]
# ## Test pixels: accuracy and calibration
#
# MAP: BP marginals at the MAP weights. Bethe-Laplace: BP marginals averaged over draws of the
# weights (`method="average"`). The baseline labels every pixel background. ECE: expected
# calibration error of the horse probability over 10 confidence bins.

# %%
pred_map = pmc.predict(fit_bl, test, method="bpe", inference=BP)
pred_bl = pmc.predict(fit_bl, test, method="average", draws=DRAWS, inference=BP)
rows = {"all background": (1.0 - test.labels.mean(), None),
        "MAP (BP marginals)": (1.0 - pred_map.error_rate,
                               expected_calibration_error(pred_map.marginals, test.labels)),
        "Bethe-Laplace, averaged": (1.0 - pred_bl.error_rate,
                                    expected_calibration_error(pred_bl.marginals, test.labels))}
print(f"{'prediction':26} pixel accuracy   ECE")
for name, (acc, ece) in rows.items():
    print(f"{name:26} {acc:14.4f}   {'' if ece is None else f'{ece:.4f}'}")

# %%
fig, axes = plt.subplots(4, 5, figsize=(12, 8), layout="constrained")
for row, g in enumerate(range(min(4, N_TEST))):
    rgb, mask = test_images[g]
    sl = slice(test.graphs.node_offsets[g], test.graphs.node_offsets[g + 1])
    p_map = pred_map.marginals[sl, 1].reshape(ROWS, COLS)
    p_bl = pred_bl.marginals[sl, 1].reshape(ROWS, COLS)
    panels = [(rgb, test_names[g]), (mask, "mask"), (p_map, "MAP: P(horse)"),
              (p_bl, "Bethe-Laplace: P(horse)"), (np.abs(p_bl - p_map), "|difference|")]
    for ax, (img, title) in zip(axes[row], panels, strict=True):
        ax.imshow(img, cmap=None if img.ndim == 3 else "gray", vmin=0, vmax=1)
        ax.set_title(title, fontsize="small")
        ax.set_axis_off()
save(fig, "segmentations")

# %%
fig, ax = plt.subplots(figsize=(4.5, 4.5))
for name, pred in (("MAP", pred_map), ("Bethe-Laplace", pred_bl)):
    rel = reliability_curve(pred.marginals, test.labels)
    ax.plot(rel.confidence, rel.accuracy, "o-", label=f"{name} (ECE {rel.ece:.3f})")
ax.plot([0.5, 1], [0.5, 1], "k:", lw=1)
ax.set_xlabel("confidence")
ax.set_ylabel("accuracy")
ax.legend()
save(fig, "reliability")
plt.close("all")
