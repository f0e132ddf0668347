"""Leave-one-graph-out cross-validation of a fitted result: ``pmc.loo(result)``.

``az.loo`` on a result of this package meets two cases where it ends in ArviZ's internal errors:

* a result with one draw (``method="map"``: the posterior mode): PSIS needs posterior draws, and
  ArviZ fails indexing an empty tail ("index 0 is out of bounds");
* a graph without any observed label: its log-likelihood is ``log 1 = 0`` in every draw (the
  labels are summed out), a constant that PSIS cannot smooth ("All tail values are the same").

:func:`loo` refuses the first with the methods that give draws, and leaves the second out of PSIS
with a warning: such a graph's leave-one-out term is exactly 0 and adds nothing to ``elpd_loo``
or ``p_loo``, so the estimate is the one ``az.loo`` would give if it could.
"""

from __future__ import annotations

import warnings
from typing import Any

import arviz as az
import numpy as np
import xarray as xr

__all__ = ["loo"]


def loo(result: xr.DataTree, var_name: str | None = None, **kwargs: Any):
    """``az.loo`` of ``result``'s per-graph (per-row for an MRF) log-likelihood, with clear errors.

    Parameters
    ----------
    result : DataTree
        A fitted result with a ``log_likelihood`` group (``pmc.fit``, ``pm.sample``).
    var_name : str, optional
        The observed variable; needed only when the result holds several.
    **kwargs
        Passed to ``az.loo`` (e.g. ``pointwise=True``).

    Returns
    -------
    The ``az.loo`` result. Graphs without an observed label are left out (with a warning): their
    leave-one-out term is exactly 0.

    Raises
    ------
    TypeError
        If ``result`` is not a DataTree.
    ValueError
        If it has no ``log_likelihood`` group, has one posterior draw (a MAP fit), or no graph
        with an observed label.
    """
    if not isinstance(result, xr.DataTree):
        raise TypeError("result must be a fitted DataTree (from pmc.fit or pm.sample); got "
                        f"{type(result).__name__}")
    if "log_likelihood" not in result.children:
        raise ValueError("pmc.loo: result has no 'log_likelihood' group; fit with "
                         "log_likelihood=True (the default of pmc.fit)")
    ll = result["log_likelihood"].to_dataset()
    names = list(ll.data_vars)
    if var_name is None:
        if len(names) != 1:
            raise ValueError(f"pmc.loo: the result's log_likelihood holds {names}; choose one "
                             "with var_name=")
        var_name = names[0]
    elif var_name not in names:
        raise ValueError(f"pmc.loo: var_name={var_name!r} is not in the result's log_likelihood "
                         f"{names}")
    da = ll[var_name]
    n_draws = int(np.prod([da.sizes.get(d, 1) for d in ("chain", "draw")]))
    method = result.attrs.get("method", "this fit")
    if n_draws < 2:
        raise ValueError(f"pmc.loo needs posterior draws; this {method!r} result has "
                         f"{n_draws} (a point estimate): fit with method='nuts', 'ep' or "
                         "'bethe_laplace' for draws, or compare point estimates on held-out data "
                         "with pmc.compare(results, test=...)")
    obs_dims = [d for d in da.dims if d not in ("chain", "draw")]
    if len(obs_dims) != 1:  # one value per graph is the package's layout; others go as they are
        return az.loo(result, var_name=var_name, **kwargs)
    [dim] = obs_dims
    empty = np.asarray((da == 0).all(("chain", "draw")))
    if not empty.any():
        return az.loo(result, var_name=var_name, **kwargs)
    if empty.all():
        raise ValueError("pmc.loo: no graph has an observed label (every log-likelihood is 0): "
                         "there is nothing to cross-validate")
    left_out = np.flatnonzero(empty).tolist()
    warnings.warn(f"pmc.loo: graphs {left_out} (positions along {dim!r}) have no observed label: "
                  "their log-likelihood is 0 in every draw and their leave-one-out term exactly "
                  "0, so they are left out of PSIS, which cannot smooth a constant", UserWarning,
                  stacklevel=2)
    kept = result.copy()
    kept["log_likelihood"] = ll[[var_name]].isel({dim: np.flatnonzero(~empty)})
    return az.loo(kept, var_name=var_name, **kwargs)
