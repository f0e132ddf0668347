"""Loopy BP whose ``log_partition`` warm-starts from given messages and keeps its last state, so a
Metropolis chain over the weights restarts BP from the fixed point of its current state (the
proposal is near it, so BP needs a few sweeps instead of hundreds)."""

from __future__ import annotations

import numpy as np

from pymc_crf.inference.bp import BeliefPropagation, BPState

__all__ = ["WarmStartBP"]


class WarmStartBP(BeliefPropagation):
    """:class:`~pymc_crf.inference.bp.BeliefPropagation` with ``messages`` (the warm start, or None)
    and ``last_state`` (the :class:`BPState` of the last ``log_partition``)."""

    def __init__(self, damping: float = 0.5, schedule: str = "parallel", tol: float = 1e-10,
                 max_iter: int = 2000):
        super().__init__(damping=damping, schedule=schedule, tol=tol, max_iter=max_iter,
                         warn=False, threads=False)
        self.messages: np.ndarray | None = None
        self.last_state: BPState | None = None

    def log_partition(self, batch, node_logpot, edge_logpot) -> np.ndarray:
        """Minus the Bethe free energy per graph, from BP started at ``self.messages``."""
        self.last_state = self.run(batch, node_logpot, edge_logpot, messages=self.messages)
        return self.last_state.log_z
