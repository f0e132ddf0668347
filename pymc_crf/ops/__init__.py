"""PyTensor Ops wrapping the inference engines."""

from pymc_crf.ops.log_partition import (
    LogPartition,
    LogPartitionGrad,
    LogPartitionHVP,
    log_partition,
)

__all__ = ["LogPartition", "LogPartitionGrad", "LogPartitionHVP", "log_partition"]
