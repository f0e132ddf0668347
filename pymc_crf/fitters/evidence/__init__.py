"""Marginal likelihood (evidence) of random-field models: Laplace-type estimates and AIS."""

from pymc_crf.fitters.evidence.ais import AISRun, ais_log_evidence
from pymc_crf.fitters.evidence.estimates import (
    EVIDENCE_METHODS,
    LogEvidence,
    log_marginal_likelihood,
)

__all__ = ["AISRun", "EVIDENCE_METHODS", "LogEvidence", "ais_log_evidence",
           "log_marginal_likelihood"]
