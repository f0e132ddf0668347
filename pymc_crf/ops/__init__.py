"""PyTensor Ops wrapping the inference engines."""

from pymc_crf.ops.log_partition import (
    LogPartition,
    LogPartitionGrad,
    LogPartitionHVP,
    LogPartitionWithGrad,
    log_partition,
)

__all__ = ["LogPartition", "LogPartitionGrad", "LogPartitionHVP", "LogPartitionWithGrad",
           "log_partition"]
