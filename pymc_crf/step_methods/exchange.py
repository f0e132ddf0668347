"""``Exchange``: the exchange algorithm (Murray, Ghahramani & MacKay 2006) on the random-field
weights.

With a symmetric proposal ``w -> w'`` and auxiliary labels ``x ~ p(x | w')`` drawn exactly, the
acceptance ratio

    a = p(w') f(y | w') f(x | w) / (p(w) f(y | w) f(x | w'))

uses only unnormalised scores ``f``: the intractable ``Z(w') / Z(w)`` of the likelihood cancels
against the auxiliary term (Murray, Ghahramani & MacKay 2006, sec. 3), so the chain leaves the exact
posterior invariant. The auxiliary draw has the design of the data (one labelling of every graph
of a CRF's batch; as many rows as the data for an MRF), from the chain / junction-tree engine's
exact sampler. Beyond exact sampling (large treewidth) the auxiliary labels come from Gibbs sweeps
started at the observed labels: an explicitly approximate variant (a warning, and
``exact_auxiliary = False`` as attribute and stat).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from pymc_crf.inference.base import Engine
from pymc_crf.inference.gibbs import Gibbs
from pymc_crf.inference.select import ENGINE_NAMES, ApproximateInferenceWarning, get_engine
from pymc_crf.step_methods.adaptation import random_walk_adaptation
from pymc_crf.step_methods.base import METROPOLIS_STATS, RandomFieldStep
from pymc_crf.validation import whole_number

if TYPE_CHECKING:
    from collections.abc import Sequence

    import pymc as pm
    from pymc.util import RandomGenerator
    from pytensor.graph.basic import Variable

    from pymc_crf.model.random_field import MRFSpec
    from pymc_crf.model.spec import CRFSpec

__all__ = ["Exchange"]


class Exchange(RandomFieldStep):
    """Exchange-algorithm Metropolis-Hastings on the weights.

    Parameters
    ----------
    vars : list, optional
        The random-field weight variables (default: all; one block).
    scaling, S, target_accept, adapt_window
        Random-walk proposal and its tuning, as :class:`~pymc_crf.step_methods.BetheMH`.
    sampler : "auto", engine name or Engine
        Auxiliary sampler. ``"auto"``: the exact chain / junction-tree engine when the graphs
        allow it, else Gibbs (approximate). An exact engine (``"chain"``, ``"junction_tree"``,
        ``"brute_force"``) raises if it cannot handle the graphs; ``"gibbs"`` forces the
        approximate variant.
    aux_sweeps : int
        Gibbs sweeps from the observed labels for the approximate variant.
    max_treewidth : int
        Largest treewidth for exact auxiliary draws by the junction tree (``"auto"``).
    tune, model, rng, initial_point, compile_kwargs, blocked, spec
        As for :class:`~pymc_crf.step_methods.BetheMH`.

    Notes
    -----
    Stats: ``tune``, ``accepted``, ``accept_rate``, ``scaling``, ``exact_auxiliary``.
    """

    name = "exchange"
    method_name = "Exchange"
    stats_dtypes_shapes = {
        **METROPOLIS_STATS,
        "exact_auxiliary": (bool, []),
    }

    def __init__(self, vars: Sequence[Variable] | None = None, *, scaling: float | None = None,
                 S: np.ndarray | None = None, target_accept: float = 0.234,
                 adapt_window: int = 50, sampler: str | Engine = "auto", aux_sweeps: int = 100,
                 max_treewidth: int = 10, tune: bool = True, model: pm.Model | None = None,
                 rng: RandomGenerator = None, initial_point: dict[str, np.ndarray] | None = None,
                 compile_kwargs: dict | None = None, blocked: bool = True,
                 spec: CRFSpec | MRFSpec | None = None):
        super().__init__(vars, model=model, rng=rng, initial_point=initial_point,
                         compile_kwargs=compile_kwargs, blocked=blocked, tune=tune,
                         spec=spec)
        aux_sweeps = whole_number(aux_sweeps, "aux_sweeps")
        batch = self.field.batch
        if isinstance(sampler, str) and sampler not in ENGINE_NAMES:
            raise ValueError(f"Exchange: unknown sampler {sampler!r}; choose 'auto', 'gibbs', an "
                             f"exact engine of {ENGINE_NAMES} or an Engine instance")
        if isinstance(sampler, str) and sampler in ("auto", "gibbs"):
            engine = (get_engine("auto", batch, max_treewidth=max_treewidth, warn=False)
                      if sampler == "auto" else None)
            if engine is None or not engine.exact:
                engine = Gibbs(burn_in=aux_sweeps - 1, thin=1, n_samples=1)
        else:
            engine = get_engine(sampler, batch, max_treewidth=max_treewidth, warn=False)
        self.sampler = engine
        self.exact_auxiliary = bool(getattr(engine, "exact", False))
        if not self.exact_auxiliary:
            if not isinstance(engine, Gibbs):
                raise ValueError(f"Exchange needs an exact sampler or 'gibbs'; got {engine!r}")
            warnings.warn(f"Exchange: auxiliary labels are drawn by {engine.burn_in + 1} Gibbs "
                          "sweeps from the observed labels, not exactly: the chain is an "
                          "approximation of the exchange algorithm (exact_auxiliary=False)",
                          ApproximateInferenceWarning, stacklevel=2)
        self.likelihood = self.field.likelihood()
        self.adaptation = random_walk_adaptation(self.d, self._proposal_base(S), scaling,
                                                 target_accept, adapt_window)
        self.reset_chain()

    def reset_chain(self) -> None:
        self.adaptation.reset(self.n_tune)
        self._cache = None  # (q, tables, data score) of the current state

    def _auxiliary(self, tables) -> np.ndarray:
        """One labelling of the batch at the given tables (exact, or Gibbs from the data)."""
        if self.exact_auxiliary:
            return self.field.exact_draw(self.sampler, tables, self.rng)
        return self.field.gibbs_from_data(self.sampler, tables, self.rng)

    def _propose(self, q0: np.ndarray, tune: bool) -> tuple[np.ndarray, dict]:
        f = self.field
        if self._cache is None or not np.array_equal(self._cache[0], q0):
            t0 = self.likelihood.log_potentials(q0)
            self._cache = (q0.copy(), t0, f.log_score(t0, f.labels))
        _, t0, s0 = self._cache
        q1 = q0 + self.adaptation.draw(self.rng, tune)
        t1 = self.likelihood.log_potentials(q1)
        s1 = f.log_score(t1, f.labels)
        x = self._auxiliary(t1)
        # Murray, Ghahramani & MacKay 2006, exchange algorithm: Z(w') cancels
        log_ratio = (self.rest(q1)[0] - self.rest(q0)[0] + s1 - s0
                     + f.log_score(t0, x) - f.log_score(t1, x))
        accepted, accept_rate = self._metropolis(log_ratio)
        scale = self.adaptation.scale(tune)
        if accepted:
            self._cache = (q1.copy(), t1, s1)
        q = q1 if accepted else q0
        self.adaptation.update(q, accept_rate, tune)
        return q, {"accepted": float(accepted), "accept_rate": accept_rate, "scaling": scale,
                   "exact_auxiliary": self.exact_auxiliary}
