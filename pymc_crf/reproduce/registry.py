"""The registry of paper reproductions: each experiment is a grid of independent trials.

An :class:`Experiment` names its paper result, lists its trials for a set of parameters (a size
preset, ``"quick"`` or ``"full"``, updated by the user's overrides), runs one trial as a pure
function of ``(settings, seed)`` and turns the finished trials into a :class:`Report`.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Experiment", "Report", "Trial", "TrialResult", "available", "bad_parameter", "get",
           "register"]


@dataclass(frozen=True)
class Trial:
    """One cell of an experiment's grid: JSON-serialisable ``settings`` and an integer ``seed``."""

    settings: dict[str, Any]
    seed: int


@dataclass(frozen=True)
class TrialResult:
    """A finished trial: its settings, seed and the small dict of numbers it returned.

    Keys of ``values`` that start with ``"time"`` are wall times; every other value is a pure
    function of ``(settings, seed)``.
    """

    settings: dict[str, Any]
    seed: int
    values: dict[str, float]


@dataclass
class Report:
    """What an experiment writes: markdown ``tables`` (deterministic numbers, the paper's beside
    ours), markdown ``timings`` (wall times, which vary between runs) and a matplotlib ``figure``."""

    tables: str
    timings: str = ""
    figure: Any = None


@dataclass(frozen=True)
class Experiment:
    """A paper result as a grid of trials.

    Attributes
    ----------
    name, description : str
        The command-line name and a one-line description (shown by ``--list``).
    sizes : dict
        Parameter presets, at least ``"quick"`` (seconds, used by the tests) and ``"full"`` (the
        paper's grid).
    trials : callable
        ``trials(params) -> list[Trial]`` in a fixed order.
    run_trial : callable
        ``run_trial(settings, seed) -> dict[str, float]``, pure apart from the ``time*`` keys.
    report : callable
        ``report(results, params) -> Report`` with ``results`` in the order of ``trials(params)``.
    unavailable : callable, optional
        ``unavailable() -> str | None``: a one-line reason the experiment cannot run here (data or
        files absent), or None.
    sources : tuple of str
        Files outside the package that the trials run (e.g. a ``bench/`` module): their
        content is part of the cache key, as the package's own sources are.
    zero_ok : tuple of str
        Integer parameters that may be 0 (every other integer parameter is a count >= 1, unless
        a preset gives it 0).
    check : callable, optional
        ``check(params) -> None``: raises a ValueError naming the parameter when the values,
        though of the presets' types, mean nothing to the trials (an unknown graph or method, a
        step size outside (0, 1], a prior scale <= 0), so a bad ``--set`` is a one-line error
        before any trial runs rather than a traceback from inside one.
    """

    name: str
    description: str
    sizes: dict[str, dict[str, Any]]
    trials: Callable[[dict[str, Any]], list[Trial]]
    run_trial: Callable[[dict[str, Any], int], dict[str, float]]
    report: Callable[[Sequence[TrialResult], dict[str, Any]], Report]
    unavailable: Callable[[], str | None] = field(default=lambda: None)
    sources: tuple[str, ...] = ()
    zero_ok: tuple[str, ...] = ()
    check: Callable[[dict[str, Any]], None] = field(default=lambda params: None)

    def params(self, size: str = "full", overrides: dict[str, Any] | None = None
               ) -> dict[str, Any]:
        """The preset ``size`` updated by ``overrides``; unknown names raise a ValueError."""
        if size not in self.sizes:
            raise ValueError(f"experiment {self.name!r} has no size {size!r} "
                             f"(sizes: {', '.join(self.sizes)})")
        params = dict(self.sizes[size])
        unknown = set(overrides or {}) - set(params)
        if unknown:
            raise ValueError(f"experiment {self.name!r} has no parameter(s) "
                             f"{', '.join(sorted(unknown))} (parameters: {', '.join(params)})")
        for key, value in (overrides or {}).items():
            params[key] = self._check_value(key, value)
        self.check(params)
        return params

    def _check_value(self, key: str, value: Any) -> Any:
        """``value`` as the override of ``key`` (a whole float such as ``3.0`` where the presets
        give an integer becomes ``3``), or a ValueError when none of the presets' JSON types fits
        (``trials="abc"``, ``trials=1.5``, ``Infinity``, a list for a dict), a count is below
        its minimum or a list repeats an entry (every list parameter is an axis of the grid: a
        repeated entry would run its trials twice and count them twice in the means)."""
        presets = [p[key] for p in self.sizes.values() if key in p]
        unfit = object()

        def kind(v: Any) -> str:
            if v is None:
                return "null"
            if isinstance(v, bool):
                return "true/false"
            if isinstance(v, numbers.Integral):
                return "integer"
            if isinstance(v, numbers.Real):
                return "number"
            return {str: "string", list: "list", tuple: "list", dict: "object"}.get(type(v),
                                                                                   "other")

        def finite(v: Any) -> bool:  # JSON integers have no size limit: 10**400 is finite
            return not isinstance(v, float) or math.isfinite(v)

        def coerce(v: Any, p: Any, name: str) -> Any:
            k, kp = kind(v), kind(p)
            if kp == "integer":
                if k not in ("integer", "number") or not finite(v) or v != int(v):
                    return unfit
                low = 0 if (name in self.zero_ok or p == 0) else 1
                if v < low:
                    raise ValueError(f"parameter {name} of {self.name!r} must be >= {low}; "
                                     f"got {v!r}")
                return int(v)
            if kp == "number":
                return v if k in ("integer", "number") and finite(v) else unfit
            if kp == "list":
                if k != "list" or len(v) == 0:
                    return unfit
                out = []
                for x in v:
                    fitted = [c for c in (coerce(x, q, name) for q in p) if c is not unfit]
                    if not fitted:
                        return unfit
                    out.append(fitted[0])
                repeated = sorted({json.dumps(x) for x in out if out.count(x) > 1})
                if repeated:
                    raise ValueError(f"parameter {name} of {self.name!r} lists "
                                     f"{', '.join(repeated)} more than once; got {v!r}")
                return out
            if kp == "object":
                return v if k == "object" else unfit
            return v if k == kp else unfit

        for p in presets:
            fitted = coerce(value, p, key)
            if fitted is not unfit:
                return fitted
        shown = " or ".join(sorted({kind(p) for p in presets}))
        example = json.dumps(presets[0], default=float)
        example = example if len(example) <= 60 else example[:57] + "..."
        raise ValueError(f"parameter {key} of {self.name!r} takes "
                         f"{'an' if shown[0] in 'aeiou' else 'a'} {shown} like {example}; "
                         f"got {value!r}")


def bad_parameter(experiment: str, key: str, what: str, value: Any) -> ValueError:
    """The ValueError an :attr:`Experiment.check` raises: ``parameter KEY of 'NAME' WHAT; got
    VALUE``."""
    return ValueError(f"parameter {key} of {experiment!r} {what}; got {value!r}")


_REGISTRY: dict[str, Experiment] = {}


def register(experiment: Experiment) -> Experiment:
    """Add ``experiment`` to the registry under its name (a repeated name is an error)."""
    if experiment.name in _REGISTRY:
        raise ValueError(f"experiment {experiment.name!r} is already registered")
    _REGISTRY[experiment.name] = experiment
    return experiment


def _load_builtin() -> None:
    # The experiment modules register themselves on import.
    from pymc_crf.reproduce import (  # noqa: F401
        ard_features,
        bcrf_tables,
        hcrf_tables,
        model_scoring,
        samplers_figures,
        tree_ep_accuracy,
    )


def available() -> dict[str, Experiment]:
    """All registered experiments by name, in registration order."""
    _load_builtin()
    return dict(_REGISTRY)


def get(name: str) -> Experiment:
    """The experiment called ``name``; a ValueError names the registered ones otherwise."""
    experiments = available()
    if name not in experiments:
        raise ValueError(f"no experiment {name!r}; registered: {', '.join(experiments)}")
    return experiments[name]
