"""Plots of fitted CRF posteriors, comparisons, convergence and predicted marginals (matplotlib).

Every function draws on matplotlib axes (``ax=`` to draw on yours, else a new figure) and returns
the axes it drew on, so ArviZ plots and these can share a figure.
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import xarray as xr
from matplotlib.axes import Axes

from pymc_crf.compare import check_results, cvm_score, posterior_matrix
from pymc_crf.datasets.base import CRFData
from pymc_crf.graphs.batch import GraphBatch
from pymc_crf.metrics import Reliability
from pymc_crf.model.predictors import result_gaussian
from pymc_crf.predict import Prediction
from pymc_crf.validation import flag, name_list, whole_number

if TYPE_CHECKING:
    import pymc as pm
    from arviz_plots import PlotCollection

__all__ = ["plot_calibration_pava", "plot_compare", "plot_convergence", "plot_marginals_chain",
           "plot_marginals_grid", "plot_reliability", "plot_posterior_marginals"]

_REFERENCE_COLOR = "0.55"


def _check_ax(ax) -> None:
    """Refuse an ``ax=`` that is not one matplotlib Axes (None passes: draw on a new figure)."""
    if ax is not None and not isinstance(ax, Axes):
        raise TypeError(f"ax must be one matplotlib Axes (or None for a new figure); "
                        f"got {type(ax).__name__}")



def _check_mapping(value, name: str, what: str) -> None:
    """Refuse a ``value`` that is not a non-empty dict of label -> ``what``."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict of name -> {what}; got {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} is empty: pass a dict of name -> {what}")


def _axes_grid(n: int, ax, ncols: int, panel_size=(3.0, 2.3)) -> np.ndarray:
    """``n`` axes: the caller's (checked) or a new figure's, as a flat object array."""
    if ax is not None:
        axes = np.ravel(np.asarray(ax, dtype=object))
        wrong = [type(a).__name__ for a in axes if not isinstance(a, Axes)]
        if wrong:
            raise TypeError(f"ax must be matplotlib Axes or an array of them; got {wrong[0]}")
        if axes.size < n:
            raise ValueError(f"this plot needs {n} axes; ax= gives {axes.size}")
        return axes[:n]
    ncols = max(1, min(ncols, n))
    nrows = -(-n // ncols)
    fig, axes = plt.subplots(nrows, ncols, squeeze=False, layout="constrained",
                             figsize=(panel_size[0] * ncols, panel_size[1] * nrows))
    axes = axes.ravel()
    for extra in axes[n:]:
        extra.set_visible(False)
    return axes[:n]


def _param_names(result: xr.DataTree, var_names: Sequence[str] | None) -> list[str]:
    """Names ``"w[0, 1, 1]"`` of the columns of :func:`pymc_crf.compare.posterior_matrix`."""
    post = result["posterior"]
    names = []
    for v in var_names or list(post.data_vars):
        shape = post[v].shape[2:]
        if not shape:
            names.append(v)
        for idx in np.ndindex(*shape) if shape else ():
            names.append(f"{v}[{', '.join(map(str, idx))}]")
    return names


def _gaussian_marginals(result: xr.DataTree, names: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """Means and sds of a Gaussian fit's marginals for ``names``, NaN for names the Gaussian does
    not cover (a learned prior scale beside the weights' Gaussian); None if the result has no
    Gaussian (e.g. MCMC or randomized MAP draws) or it covers none of ``names``."""
    gauss = result_gaussian(result)
    if gauss is None:
        return None
    index = {n: i for i, n in enumerate(gauss.names)}
    pos = np.array([index.get(n, -1) for n in names])
    if not np.any(pos >= 0):
        return None
    mean = np.where(pos >= 0, gauss.mean[pos], np.nan)
    sd = np.where(pos >= 0, np.sqrt(np.clip(gauss.var[pos], 0.0, None)), np.nan)
    return mean, sd


def plot_posterior_marginals(results: Mapping[str, xr.DataTree], var_names: Sequence[str] | None = None,
                             reference: str | None = None, *, bins: int = 30,
                             max_panels: int | None = 12, sort: str | None = "cvm",
                             gaussian: bool = True, ncols: int = 4,
                             ax: Axes | Sequence[Axes] | np.ndarray | None = None) -> np.ndarray:
    """Marginal posterior of every weight, one panel per weight, all methods overlaid.

    In the style of Welling & Parise 2006, figs. 3, 7 and 8: the reference posterior (usually NUTS)
    as a filled histogram, the other methods as outlines on top of it. A method with a Gaussian
    ``fit`` group (EP, Bethe-Laplace) is drawn as its exact Gaussian marginal density when
    ``gaussian`` is true (filled when it is the reference; a histogram of its draws for variables
    the Gaussian does not cover, such as a learned prior scale; a solid vertical line where the
    marginal is a point mass, a weight predictive ARD pruned); a point estimate (one draw, e.g.
    MAP) as a dashed vertical line.

    Parameters
    ----------
    results : dict of str to DataTree
        Fitted results (any fitter, or ``pm.sample``), keyed by the label to show.
    var_names : list of str, optional
        Posterior variables to show (default: all of the first result's).
    reference : str, optional
        Key of the reference result, drawn filled.
    bins : int
        Histogram bins (shared by all methods of a panel).
    max_panels : int or None
        Show at most this many weights (None: all).
    sort : {"cvm", None}
        With a reference, ``"cvm"`` orders the panels from the worst to the best fit: by the
        largest normalised Cramer-von Mises score (Welling & Parise 2006, eq. (23)) of any other
        method against the reference, as figs. 7 and 8 show worst and best fits. ``None`` keeps
        the parameter order.
    gaussian : bool
        Draw methods with a ``fit`` group as Gaussian densities rather than histograms of draws.
    ncols : int
        Panels per row of a new figure.
    ax : matplotlib Axes or array of Axes, optional
        At least as many axes as panels.

    Returns
    -------
    numpy.ndarray of matplotlib.axes.Axes
        One axes per panel; each has the parameter name as its title.

    Examples
    --------
    >>> import pymc_crf as pmc
    >>> axes = pmc.plots.plot_posterior_marginals(  # doctest: +SKIP
    ...     {"nuts": gold, "ep": ep, "map": point}, reference="nuts", max_panels=8)
    """
    check_results(results, "plot_posterior_marginals")
    if reference is not None and reference not in results:
        raise ValueError(f"reference {reference!r} is not one of {list(results)}")
    if sort not in ("cvm", None):
        raise ValueError(f"sort must be 'cvm' or None; got {sort!r}")
    var_names = name_list(var_names, "var_names")
    bins = whole_number(bins, "bins")
    if max_panels is not None:
        max_panels = whole_number(max_panels, "max_panels")
    ncols = whole_number(ncols, "ncols")
    first = next(iter(results.values()))
    var_names = var_names if var_names is not None else list(first["posterior"].data_vars)
    for key, res in results.items():
        missing = [v for v in var_names if v not in res["posterior"].data_vars]
        if missing:
            raise ValueError(f"result {key!r} has no posterior variable(s) {missing}")
    names = _param_names(first, var_names)
    mats = {}
    for key, res in results.items():
        mats[key] = posterior_matrix(res, var_names)
        if mats[key].shape[1] != len(names):
            raise ValueError(f"result {key!r} has {mats[key].shape[1]} parameters in {var_names}; "
                             f"the first result has {len(names)}")
    order = np.arange(len(names))
    scores = None
    if reference is not None and sort == "cvm":
        ref = mats[reference]
        others = [k for k in mats if k != reference and mats[k].shape[0] > 1]
        if others:
            scores = np.array([[cvm_score(mats[k][:, j], ref[:, j], normalize=True) for k in others]
                               for j in range(len(names))]).max(axis=1)
            order = np.argsort(-scores, kind="stable")
    if max_panels is not None:
        order = order[:max_panels]
    axes = _axes_grid(order.size, ax, ncols)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = {}
    i = 0
    for key in results:
        styles[key] = _REFERENCE_COLOR if key == reference else colors[i % len(colors)]
        i += key != reference
    gaussian = flag(gaussian, "gaussian")
    gauss = {k: _gaussian_marginals(r, names) if gaussian else None for k, r in results.items()}
    for a, j in zip(axes, order, strict=True):
        cols = {k: m[:, j] for k, m in mats.items()}
        multi = [c for c in cols.values() if c.size > 1]
        span = np.concatenate(multi or list(cols.values()))
        lo, hi = float(span.min()), float(span.max())
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        edges = np.linspace(lo, hi, bins + 1)
        for key, x in cols.items():
            color = styles[key]
            mu, sd = (np.nan, np.nan) if gauss[key] is None else (gauss[key][0][j], gauss[key][1][j])
            if x.size == 1:
                a.axvline(x[0], color=color, lw=1.5, ls="--", label=key)
            elif sd == 0.0:
                # a point mass (a weight predictive ARD pruned): no density to draw
                a.axvline(mu, color=color, lw=1.5, label=key)
            elif np.isfinite(sd):
                grid = np.linspace(lo, hi, 200)
                density = np.exp(-0.5 * ((grid - mu) / sd) ** 2) / (sd * np.sqrt(2 * np.pi))
                if key == reference:
                    a.fill_between(grid, density, color=color, alpha=0.6, lw=0, label=key)
                else:
                    a.plot(grid, density, color=color, lw=1.5, label=key)
            elif key == reference:
                a.hist(x, bins=edges, density=True, color=color, alpha=0.6, label=key)
            else:
                a.hist(x, bins=edges, density=True, histtype="step", color=color, lw=1.5,
                       label=key)
        title = names[j] if scores is None else f"{names[j]}  (CVM {scores[j]:.3g})"
        a.set_title(title, fontsize="small")
        a.set_yticks([])
    axes[0].legend(fontsize="x-small", frameon=False)
    return axes


def plot_compare(table: pd.DataFrame, columns: Sequence[str] | None = None, *,
                 reference: str | None = None,
                 ax: Axes | Sequence[Axes] | np.ndarray | None = None) -> np.ndarray:
    """Bars of the scores of :func:`pymc_crf.compare`, one panel per column, one bar per method.

    When the table has several rows per method (e.g. ``pd.concat`` of ``compare`` tables over
    seeds or data sets), bars show the mean and error bars one standard error of it.

    Parameters
    ----------
    table : pandas.DataFrame
        As ``pmc.compare`` returns: indexed by method.
    columns : list of str, optional
        Columns to show (default: those of ``cvm``, ``mean_abs_err``, ``sd_ratio``,
        ``test_error``, ``wall_time`` present in the table).
    reference : str, optional
        A method to leave out (the reference scores zero against itself).
    ax : matplotlib Axes or array of Axes, optional
        At least one per column.

    Returns
    -------
    numpy.ndarray of matplotlib.axes.Axes
        One axes per column; methods whose value is missing (NaN) are labelled "n/a".

    Examples
    --------
    >>> import pymc_crf as pmc
    >>> table = pmc.compare({"nuts": gold, "ep": ep}, reference="nuts")  # doctest: +SKIP
    >>> axes = pmc.plots.plot_compare(table, reference="nuts")  # doctest: +SKIP
    """
    if not isinstance(table, pd.DataFrame):
        raise TypeError(f"table must be the DataFrame pmc.compare returns; got {type(table).__name__}")
    columns = name_list(columns, "columns")
    if reference is not None:
        table = table[table.index != reference]
    if columns is None:
        columns = [c for c in ("cvm", "mean_abs_err", "sd_ratio", "test_error", "wall_time")
                   if c in table.columns and table[c].notna().any()]
    else:
        missing = [c for c in columns if c not in table.columns]
        if missing:
            raise ValueError(f"columns {missing} are not in the table (it has {list(table.columns)})")
    if not columns or table.empty:
        raise ValueError("nothing to plot: the table has no rows or none of the score columns")
    grouped = table[columns].groupby(level=0, sort=False)
    mean, count = grouped.mean(), grouped.count()
    sem = (grouped.std(ddof=1) / np.sqrt(count)).where(count > 1)
    methods = list(mean.index)
    axes = _axes_grid(len(columns), ax, ncols=len(columns), panel_size=(2.8, 0.5 + 0.4 * len(methods)))
    y = np.arange(len(methods))
    for a, col in zip(axes, columns, strict=True):
        vals = mean[col].to_numpy(dtype=float)
        err = sem[col].to_numpy(dtype=float)
        a.barh(y, np.nan_to_num(vals), xerr=None if np.all(np.isnan(err)) else np.nan_to_num(err),
               color="C0", capsize=3)
        for yi, v in zip(y, vals, strict=True):
            if np.isnan(v):
                # x in axes coordinates: data x = 0 is off a log scale and at the right edge
                # of negative scores (elpd_loo)
                a.text(0.01, yi, "n/a", va="center", fontsize="small", color="0.4",
                       transform=a.get_yaxis_transform())
        a.set_yticks(y, methods)
        a.invert_yaxis()
        a.set_title(col, fontsize="small")
        if col == "sd_ratio":
            a.axvline(1.0, color="0.3", ls="--", lw=1)
        if col == "wall_time" and np.nanmin(vals) > 0 and np.nanmax(vals) > 20 * np.nanmin(vals):
            a.set_xscale("log")
    return axes


def _diagnostics_group(result) -> tuple[xr.Dataset, dict]:
    if isinstance(result, xr.Dataset):
        return result, {}
    for group in ("diagnostics", "optimizer_result"):
        if group in result.children:
            settings = result.attrs.get("settings", "{}")
            try:
                settings = json.loads(settings) if isinstance(settings, str) else dict(settings)
            except ValueError:
                settings = {}
            return result[group].to_dataset(), settings
    raise ValueError(f"result of method {result.attrs.get('method')!r} has no 'diagnostics' or "
                     "'optimizer_result' group to plot")


def plot_convergence(result: xr.DataTree | xr.Dataset, var_names: Sequence[str] | None = None, *,
                     ax: Axes | Sequence[Axes] | np.ndarray | None = None) -> np.ndarray:
    """Convergence traces of an iterative fitter (EP sweeps, VI bound, MAP objective).

    Reads the result's ``diagnostics`` group (or MAP's ``optimizer_result``): every variable with
    one value per iteration. Changes per iteration (names containing ``"change"``) share one panel
    on a log scale with the fitter's tolerance (``settings["tol"]``) as a dashed line; every other
    trace (the VI bound, the MAP objective, skipped updates, step sizes) gets its own panel. Timings
    (names ending in ``"time"``) and, unless named in ``var_names``, empty traces are left out.
    The x-axis counts the entries along the trace's dim and is labelled by it (``iteration``,
    ``outer_iteration`` of a learned prior scale's search), or, where a text variable names each
    entry (the VI bound after each of its ``step`` updates, several per iteration), by that
    variable.

    Parameters
    ----------
    result : DataTree or Dataset
        A fitter's result, or a diagnostics dataset.
    var_names : list of str, optional
        Traces to show (default: all of them).
    ax : matplotlib Axes or array of Axes, optional
        At least one per panel.

    Returns
    -------
    numpy.ndarray of matplotlib.axes.Axes
        One axes per panel; lines are labelled by variable name.

    Examples
    --------
    >>> import pymc_crf as pmc
    >>> ep = pmc.fit(model, method="ep")  # doctest: +SKIP
    >>> axes = pmc.plots.plot_convergence(ep)  # doctest: +SKIP
    """
    if not isinstance(result, xr.DataTree | xr.Dataset):
        raise TypeError("result must be a fitter's DataTree or a diagnostics Dataset; "
                        f"got {type(result).__name__}")
    var_names = name_list(var_names, "var_names")
    ds, settings = _diagnostics_group(result)
    traces = [v for v in ds.data_vars if ds[v].ndim == 1 and not str(v).endswith("time")
              and np.issubdtype(ds[v].dtype, np.number)]
    if var_names is not None:
        missing = [v for v in var_names if v not in traces]
        if missing:
            raise ValueError(f"no per-iteration trace named {missing}; available: {traces}")
        traces = var_names
    else:
        # an empty trace (the MAP at learned prior scales, started at its optimum: 0 iterations)
        # has nothing to draw
        traces = [v for v in traces if ds[v].size] or traces
    if not traces:
        per_draw = [str(v) for v in ds.data_vars if {"chain", "draw"} <= set(ds[v].dims)]
        raise ValueError("the diagnostics have no per-iteration traces to plot" + (
            f"; this result's are per draw ({per_draw}), one optimisation per draw rather "
            "than one iterative fit" if per_draw else ""))
    changes = [v for v in traces if "change" in str(v)]
    panels: list[list[str]] = ([changes] if changes else []) + [[v] for v in traces if v not in changes]
    # A text variable along a trace's dim names what each entry records (bp_hcrf_vi's ``step``:
    # one bound after each of init, pi, z, bp and theta, several entries per iteration), so the
    # x-axis counts those entries rather than iterations.
    entry_names = {ds[v].dims[0]: str(v) for v in ds.data_vars
                   if ds[v].ndim == 1 and ds[v].dtype.kind in "USO"}
    axes = _axes_grid(len(panels), ax, ncols=len(panels), panel_size=(3.6, 2.6))
    for a, panel in zip(axes, panels, strict=True):
        for v in panel:
            y = np.asarray(ds[v].values, dtype=float)
            a.plot(np.arange(1, y.size + 1), y, marker="." if y.size < 60 else None, label=str(v))
        named = entry_names.get(ds[panel[0]].dims[0])
        if named is None:
            # the trace's own dim: "iteration", or "outer iteration" of the prior-scale search
            # beside the L-BFGS objective of a Laplace fit with learned scales
            a.set_xlabel(str(ds[panel[0]].dims[0]).replace("_", " "))
        else:
            kinds = "/".join(dict.fromkeys(str(n) for n in ds[named].values))
            a.set_xlabel(f"{named} ({kinds})")
        if panel is changes:
            a.set_yscale("log")
            if "tol" in settings and settings["tol"] is not None:
                a.axhline(float(settings["tol"]), color="0.3", ls="--", lw=1, label="tol")
            a.set_title("change per iteration", fontsize="small")
            a.legend(fontsize="x-small", frameon=False)
        else:
            a.set_title(str(panel[0]), fontsize="small")
    return axes


def _graph_nodes(n_nodes: int, data: CRFData | GraphBatch | None, graph) -> tuple[np.ndarray, list]:
    """Flat node ids of ``graph`` (int or sequence) and the node counts per graph shown."""
    if data is None:
        return np.arange(n_nodes), [n_nodes]
    batch = data.graphs if isinstance(data, CRFData) else data
    if not isinstance(batch, GraphBatch):
        raise TypeError(f"data must be a CRFData or GraphBatch; got {type(data).__name__}")
    if batch.n_total_nodes != n_nodes:
        raise ValueError(f"the prediction has {n_nodes} nodes but the graphs have "
                         f"{batch.n_total_nodes}: pass the data the prediction was made for")
    graphs = np.atleast_1d(np.asarray(graph))
    if graphs.ndim != 1 or not all(isinstance(g, numbers.Integral | np.integer)
                                   and not isinstance(g, bool | np.bool_) for g in graphs.tolist()):
        raise ValueError(f"graph must be a graph index or a list of them; got {graph!r}")
    graphs = graphs.astype(np.int64)
    if graphs.size == 0 or graphs.min() < 0 or graphs.max() >= batch.n_graphs:
        raise ValueError(f"graph {graph!r} out of range 0..{batch.n_graphs - 1}")
    return batch.node_index(graphs), [int(batch.n_nodes[g]) for g in graphs]


def _check_prediction(prediction: Prediction) -> np.ndarray:
    if not isinstance(prediction, Prediction):
        raise TypeError("prediction must be a pmc.Prediction (what pmc.predict returns); "
                        f"got {type(prediction).__name__}")
    marg = np.asarray(prediction.marginals)
    if marg.ndim != 2 or prediction.per_graph:
        raise TypeError("prediction must be a pmc.predict result with (N, K) node marginals; the "
                        f"per-graph class probabilities of hidden CRFs ({prediction.method!r}) "
                        "are not node marginals")
    return marg


def plot_marginals_chain(prediction: Prediction, data: CRFData | GraphBatch | None = None,
                         graph: int | Sequence[int] = 0, *, true_labels: bool = True,
                         cmap: str = "viridis", ax: Axes | None = None) -> Axes:
    """Predicted node marginals of chain(s) as a heatmap: label (rows) by position (columns).

    Parameters
    ----------
    prediction : Prediction
        From :func:`pymc_crf.predict`.
    data : CRFData or GraphBatch, optional
        The data the prediction was made for; selects ``graph``. Without it all nodes are shown as
        one sequence.
    graph : int or sequence of int
        Graph(s) to show; several graphs are placed side by side, separated by white lines.
    true_labels : bool
        Mark the true labels (white circles) when ``data`` has labels; predicted labels are
        marked with red crosses.
    cmap : str
        Colormap of the probabilities (range 0 to 1).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
        Its image holds the (K, positions) marginals.

    Examples
    --------
    >>> import pymc_crf as pmc
    >>> pred = pmc.predict(result, test, method="average")  # doctest: +SKIP
    >>> ax = pmc.plots.plot_marginals_chain(pred, test, graph=[0, 1, 2])  # doctest: +SKIP
    """
    marg = _check_prediction(prediction)
    _check_ax(ax)
    nodes, sizes = _graph_nodes(marg.shape[0], data, graph)
    if ax is None:
        _, ax = plt.subplots(figsize=(min(12.0, 1.5 + 0.35 * nodes.size), 0.9 + 0.35 * marg.shape[1]),
                             layout="constrained")
    image = ax.imshow(marg[nodes].T, aspect="auto", origin="lower", cmap=cmap, vmin=0.0, vmax=1.0,
                      interpolation="nearest")
    pos = np.arange(nodes.size)
    ax.scatter(pos, np.asarray(prediction.labels)[nodes], marker="x", color="red", s=30,
               label="predicted", zorder=3)
    labels = data.labels if isinstance(data, CRFData) else None
    if flag(true_labels, "true_labels") and labels is not None:
        ax.scatter(pos, labels[nodes], marker="o", facecolors="none", edgecolors="white", s=90,
                   label="true", zorder=3)
    for b in np.cumsum(sizes)[:-1]:
        ax.axvline(b - 0.5, color="white", lw=2)
    if len(sizes) > 1 and nodes.size <= 60:  # positions within each graph
        ax.set_xticks(pos, np.concatenate([np.arange(s) for s in sizes]), fontsize="small")
    ax.set_xlabel("position" if len(sizes) == 1 else f"position (graphs {np.ravel(graph).tolist()})")
    ax.set_ylabel("label")
    ax.set_yticks(np.arange(marg.shape[1]))
    ax.figure.colorbar(image, ax=ax, label="P(label)")
    ax.legend(loc="lower right", bbox_to_anchor=(1, 1), ncols=2, fontsize="x-small",
              facecolor="0.7", framealpha=1)
    return ax


def plot_marginals_grid(prediction: Prediction, shape: tuple[int, int],
                        data: CRFData | GraphBatch | None = None, graph: int = 0, *, label: int = 1,
                        show_errors: bool = True, cmap: str = "RdBu_r",
                        ax: Axes | None = None) -> Axes:
    """Predicted ``P(label)`` on a grid graph as an image (nodes in row-major order).

    Parameters
    ----------
    prediction : Prediction
        From :func:`pymc_crf.predict` on grid graphs (``GraphBatch.grid`` numbers nodes row-major).
    shape : (rows, cols)
        The grid's shape; ``rows * cols`` must equal the graph's node count.
    data : CRFData or GraphBatch, optional
        The data the prediction was made for; selects ``graph``. Without it the prediction must
        hold exactly one grid.
    graph : int
        Which graph of ``data``.
    label : int
        The label whose marginal probability is shown.
    show_errors : bool
        Mark nodes whose predicted label differs from the true one (black crosses, counted in the
        x-axis label) when ``data`` has labels.
    cmap : str
        Colormap (range 0 to 1).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib.axes.Axes
        Its image holds the (rows, cols) probabilities, with pixel ``(r, c)`` centred on ``(c, r)``.

    Examples
    --------
    >>> import pymc_crf as pmc
    >>> pred = pmc.predict(result, test, method="bpe", inference="bp")  # doctest: +SKIP
    >>> ax = pmc.plots.plot_marginals_grid(pred, (8, 8), test, graph=0)  # doctest: +SKIP
    """
    marg = _check_prediction(prediction)
    _check_ax(ax)
    if isinstance(shape, str) or not isinstance(shape, Sequence | np.ndarray) or len(shape) != 2:
        raise TypeError(f"shape must be a (rows, cols) pair; got {shape!r}")
    rows, cols = whole_number(shape[0], "shape[0] (rows)"), whole_number(shape[1], "shape[1] (cols)")
    label = whole_number(label, "label", minimum=0)
    graph = whole_number(graph, "graph", minimum=0)
    if not label < marg.shape[1]:
        raise ValueError(f"label {label} out of range 0..{marg.shape[1] - 1}")
    nodes, _ = _graph_nodes(marg.shape[0], data, graph)
    if rows * cols != nodes.size:
        raise ValueError(f"shape {rows}x{cols} has {rows * cols} nodes; the graph has {nodes.size}")
    if ax is None:
        _, ax = plt.subplots(figsize=(1.5 + 0.35 * cols, 0.8 + 0.35 * rows), layout="constrained")
    image = ax.imshow(marg[nodes, label].reshape(rows, cols), cmap=cmap, vmin=0.0, vmax=1.0,
                      interpolation="nearest", origin="upper", extent=(-0.5, cols - 0.5, rows - 0.5, -0.5))
    labels = data.labels if isinstance(data, CRFData) else None
    if flag(show_errors, "show_errors") and labels is not None:
        wrong = np.flatnonzero(np.asarray(prediction.labels)[nodes] != labels[nodes])
        ax.scatter(wrong % cols, wrong // cols, marker="x", color="black", s=25)
        ax.set_xlabel(f"x: {wrong.size} of {nodes.size} labels wrong", fontsize="small")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.figure.colorbar(image, ax=ax, label=f"P(label = {label})")
    return ax


def plot_reliability(curves: Mapping[str, Reliability], *, ax: Axes | None = None,
                     title: str = "") -> Axes:
    """Reliability curves (accuracy against mean confidence per bin) of several predictors, from
    :func:`pymc_crf.metrics.reliability_curve`, with the diagonal of perfect calibration and each
    curve's expected calibration error in the legend. Returns the axes.

    Parameters
    ----------
    curves : dict of str to Reliability
        One :class:`~pymc_crf.metrics.Reliability` per predictor, keyed by the label to show
        (with the curve's ECE) in the legend.
    ax : matplotlib Axes, optional
        Axes to draw on (default: a new figure's).
    title : str
        Title of the axes.

    Returns
    -------
    matplotlib.axes.Axes
        One line per curve (bins with no predictions left out) after the dashed diagonal.

    Examples
    --------
    >>> import pymc_crf as pmc
    >>> curve = pmc.metrics.reliability_curve(pred.marginals, test.labels)  # doctest: +SKIP
    >>> ax = pmc.plots.plot_reliability({"nuts": curve})  # doctest: +SKIP
    """
    _check_mapping(curves, "curves", "Reliability")
    for name, r in curves.items():
        if not isinstance(r, Reliability):
            raise TypeError(f"curves[{name!r}] must be a pymc_crf.metrics.Reliability (from "
                            f"pmc.metrics.reliability_curve); got {type(r).__name__}")
    if not isinstance(title, str):
        raise TypeError(f"title must be a str; got {type(title).__name__}")
    _check_ax(ax)
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 4.5))
    ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--")
    for name, r in curves.items():
        used = r.count > 0
        ax.plot(r.confidence[used], r.accuracy[used], marker="o", label=f"{name} (ECE {r.ece:.3f})")
    ax.set(xlabel="confidence (largest marginal)", ylabel="accuracy", title=title)
    ax.legend(loc="upper left")
    return ax


def plot_calibration_pava(result: xr.DataTree, data: CRFData, *, draws: int = 200,
                          model: pm.Model | None = None, random_seed: int | None = 0,
                          backend: str = "matplotlib") -> PlotCollection:
    """PAV-adjusted calibration plot of a CRF's posterior predictive labels.

    One panel per label against the others (arviz-plots' ``plot_ppc_pava`` with
    ``data_type="categorical"``), one panel for two labels (``"binary"``); Dimitriadis, Gneiting
    & Jordan 2021.

    The posterior predictive is ``draws`` labellings of ``data`` (``pmc.queries.
    sample_labellings``: each from the CRF at a posterior draw, or at the MAP for a one-point
    fit); the observed data are ``data.labels``.

    Parameters
    ----------
    result : xarray.DataTree
        A fitted CRF result.
    data : CRFData
        Labelled graphs (no missing labels).
    draws : int
        Predictive labellings (the calibration's probabilities are their frequencies).
    model : pm.Model, optional
        Only for results that do not record their CRF layout (``pm.sample`` output).
    random_seed : int, optional
        Seed of the labellings.
    backend : str
        arviz-plots backend.

    Returns
    -------
    arviz_plots.PlotCollection

    Raises
    ------
    ValueError
        When ``data`` is not a labelled ``CRFData``, has missing labels, or ``draws`` is not an
        integer >= 2.
    """
    import arviz_plots as azp

    from pymc_crf.queries import sample_labellings

    if not isinstance(data, CRFData) or data.labels is None:
        raise ValueError("plot_calibration_pava needs labelled data (a pmc.CRFData with labels)")
    obs = np.asarray(data.labels).ravel()
    if np.any(obs < 0):
        raise ValueError("plot_calibration_pava: data has missing labels; calibration is "
                         "measured on labelled nodes only: pass the labelled graphs")
    draws = whole_number(draws, "draws", minimum=2)
    y = sample_labellings(result, data, draws, model=model, random_seed=random_seed)
    dt = xr.DataTree.from_dict({
        "posterior_predictive": xr.Dataset({"labels": (("chain", "draw", "node"), y[None])}),
        "observed_data": xr.Dataset({"labels": (("node",), obs)}),
    })
    kind = "binary" if int(data.n_labels) == 2 else "categorical"
    return azp.plot_ppc_pava(dt, data_type=kind, backend=backend)
