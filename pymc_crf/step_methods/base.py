"""What the random-field step methods share: the variables they own, the rest-of-model log
density, proposal tuning and per-chain state, on top of PyMC's ``ArrayStepShared``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence
from pymc.util import get_value_vars_from_user_vars

from pymc_crf.model.random_field import extract_random_field
from pymc_crf.step_methods.field import RandomFieldTerm
from pymc_crf.step_methods.rest_logp import rest_logp
from pymc_crf.validation import flag

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pymc.util import RandomGenerator
    from pytensor.graph.basic import Variable

    from pymc_crf.model.random_field import MRFSpec
    from pymc_crf.model.spec import CRFSpec

__all__ = ["RandomFieldStep"]


def _is_field_weight(var) -> bool:
    """True when ``var`` (an RV or value variable) is a weight of the model's pmc.CRF / pmc.MRF
    likelihood (read back from the likelihood's own inputs)."""
    try:
        model = pm.modelcontext(None)
    except TypeError:
        return False
    rv = model.values_to_rvs.get(var, var)
    try:
        spec = extract_random_field(model)
    except ValueError:
        return False
    return rv.name is not None and rv.name in {w.name for w in spec.weights if w.name}


#: the stats every random-walk Metropolis step on the weights reports (BetheMH, Exchange).
#: ``accepted`` (1.0 or 0.0) has the dtype of ``pm.Metropolis``'s stat of that name: PyMC's trace
#: refuses a compound step whose samplers declare one stat name with two dtypes.
METROPOLIS_STATS = {
    "tune": (bool, []),
    "accepted": (np.float64, []),
    "accept_rate": (np.float64, []),
    "scaling": (np.float64, []),
}


class RandomFieldStep(ArrayStepShared):
    """Base class: a blocked step on all weight tensors of a model's random-field likelihood.

    Subclasses implement ``_propose(q, tune) -> (q_new, stats)``; the base class resolves the
    variables (in the flat weight order of the likelihood object), builds the rest-of-model log
    density, and resets the per-chain state (tuning, warm starts) in :meth:`setup_chain`.

    Parameters
    ----------
    vars : sequence of Variable, optional
        The random-field weight variables (random or value variables; default: all of them);
        they must be all the weights, which are sampled as one block in the likelihood's flat
        weight order.
    model : pm.Model, optional
        The model (default: the one of the ``with`` context).
    rng : int, sequence of int, Generator or None, optional
        As for PyMC's step methods.
    initial_point : dict of str to ndarray, optional
        The point the rest-of-model log density is compiled at (default
        ``model.initial_point()``).
    compile_kwargs : dict, optional
        Passed to the compilation of the rest-of-model log density.
    blocked : bool, default True
        Must be True: all the weights move as one block (``blocked=False`` is refused).
    tune : bool, default True
        Adapt the proposal in the tuning phase.
    spec : CRFSpec or MRFSpec, optional
        The model's random field as already read (:func:`pymc_crf.model.extract_random_field`),
        else read from the model.

    Raises
    ------
    ValueError
        When ``blocked`` is False, ``vars`` are not exactly the random-field weights, or the
        model's random field is not one the step samples.
    """

    default_blocked = True
    method_name = "RandomFieldStep"

    def __new__(cls, *args, **kwargs):
        # PyMC's BlockedStep.__new__ would split blocked=False into one step per weight tensor,
        # each then refused for not holding all the weights
        if not flag(kwargs.get("blocked", True), "blocked"):
            raise ValueError(f"{cls.method_name} moves all random-field weights as one block; "
                             "blocked=False is not supported")
        return super().__new__(cls, *args, **kwargs)

    def __init__(self, vars: Sequence[Variable] | None = None, *, model: pm.Model | None = None,
                 rng: RandomGenerator = None, initial_point: dict[str, np.ndarray] | None = None,
                 compile_kwargs: dict | None = None, blocked: bool = True, tune: bool = True,
                 spec: CRFSpec | MRFSpec | None = None):
        model = pm.modelcontext(model)
        field = RandomFieldTerm(model, self.method_name, spec)
        if vars is None:
            vars = [model.rvs_to_values[model[n]] for n in field.weight_names]
        vars = get_value_vars_from_user_vars(vars, model)
        names = {v.name for v in vars}
        if names != set(field.weight_names):
            raise ValueError(f"{self.method_name} samples all random-field weights together: "
                             f"expected {sorted(field.weight_names)}, got {sorted(names)}")
        # the raveled point follows the order of self.vars: make it the flat weight order
        vars = [model.rvs_to_values[model[n]] for n in field.weight_names]
        if initial_point is None:
            initial_point = model.initial_point()
        self.field = field
        self.d = field.size
        self.rest, shared = rest_logp(model, field, vars, initial_point, compile_kwargs)
        self.tune = self._tune_requested = flag(tune, "tune")
        self.n_tune: int | None = None  # tuning steps of the current chain (from setup_chain)
        super().__init__(vars, shared, blocked=blocked, rng=rng)

    # ------------------------------------------------------------------ PyMC interface
    def setup_chain(self, rng: RandomGenerator, tune: int, draws: int) -> None:
        """Start a chain (PyMC calls it): PyMC's per-chain set-up, then tuning on when the chain
        has tuning steps (and ``tune`` was asked for) and the per-chain state reset.

        Parameters
        ----------
        rng : int, sequence of int, Generator or None
            The chain's random generator (or its seed), as PyMC passes it.
        tune : int
            Tuning steps of the chain.
        draws : int
            Draws of the chain.
        """
        super().setup_chain(rng, tune, draws)
        self.n_tune = int(tune)
        # PyMC sets ``tune`` at the start of a chain only on the outermost step: inside a
        # CompoundStep, stop_tuning at the end of one chain would leave every later chain untuned
        self.tune = self._tune_requested and self.n_tune > 0
        self.reset_chain()

    def reset_chain(self) -> None:
        """Reset per-chain state (tuning, warm starts); subclasses extend it."""

    def _proposal_base(self, S) -> np.ndarray | None:
        """The starting proposal: ``None`` (unit), standard deviations (d,) or a covariance (d, d).
        The Bethe-Laplace covariance is computed by a fitter, above this layer: ``S="laplace"``
        is ``pmc.fit``'s option; by hand, ``S=pmc.fitters.laplace_init(model).covariance``."""
        if isinstance(S, str):
            raise ValueError(f"{self.method_name}: S must be an array or None; got {S!r} (the "
                             "Bethe-Laplace covariance is pmc.fitters.laplace_init(model).covariance"
                             ", or pmc.fit(model, method=..., S='laplace'))")
        return S

    def reset_tuning(self) -> None:
        if self.n_tune is not None:
            self.tune = self._tune_requested and self.n_tune > 0
        self.reset_chain()

    def step(self, point: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[dict[str, Any]]]:
        """One move of the weights from ``point`` (PyMC's step interface).

        Parameters
        ----------
        point : dict of str to ndarray
            The current values of the model's value variables.

        Returns
        -------
        point : dict of str to ndarray
            ``point`` with the weights replaced by the new ones.
        stats : list of dict
            The step's statistics (one dict).
        """
        # PyMC's ArrayStepShared.step ravels the whole point, in the model's declaration order,
        # when there are no shared variables (the weights are the only free variables); astep
        # reads the weights in the likelihood's flat order (self.var_names), so cut the point
        # down to them in that order whatever the declaration order.
        if self.shared:
            return super().step(point)
        new, stats = super().step({name: point[name] for name in self.var_names})
        return {**point, **new}, stats

    def astep(self, q0: RaveledVars) -> tuple[RaveledVars, list[dict]]:
        """One move from the raveled weights ``q0`` (PyMC's array-step interface).

        Parameters
        ----------
        q0 : RaveledVars
            The current weights, raveled in the likelihood's flat weight order.

        Returns
        -------
        q : RaveledVars
            The new weights (with ``q0``'s point map).
        stats : list of dict
            The step's statistics (one dict, with ``tune``).
        """
        q, stats = self._propose(np.asarray(q0.data, dtype=np.float64), bool(self.tune))
        stats["tune"] = bool(self.tune)
        return RaveledVars(q, q0.point_map_info), [stats]

    def _propose(self, q: np.ndarray, tune: bool) -> tuple[np.ndarray, dict]:
        """One move from ``q``: the new point and this step's stats (each subclass's own)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _propose")

    def _metropolis(self, log_ratio: float, test: bool = True) -> tuple[bool, float]:
        """``(accepted, min(1, exp(log_ratio)))``; a non-finite ratio is a rejection. With
        ``test=False`` the move is taken whatever the ratio (a uniform is not drawn)."""
        finite = bool(np.isfinite(log_ratio))
        accept_rate = float(np.exp(min(0.0, log_ratio))) if finite else 0.0
        if not test:
            return True, accept_rate
        return finite and bool(np.log(self.rng.uniform()) < log_ratio), accept_rate

    @staticmethod
    def competence(var: Variable, has_grad: bool) -> Competence:
        """How well the step samples ``var``: ``COMPATIBLE`` for a weight of the model's
        random-field likelihood, else ``INCOMPATIBLE``.

        Parameters
        ----------
        var : Variable
            A random or value variable of the model in the ``with`` context.
        has_grad : bool
            Whether the model has gradients for it (not used).

        Returns
        -------
        Competence
        """
        # Chosen by pm.sample only when asked for, or for random-field weights that nothing
        # else can sample (NUTS is IDEAL for continuous variables with gradients).
        if _is_field_weight(var):
            return Competence.COMPATIBLE
        return Competence.INCOMPATIBLE
