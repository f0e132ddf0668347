"""PyTensor Ops wrapping the inference engines."""

from pymc_crf.ops.log_partition import (
    FeatureLogPartition,
    FeatureLogPartitionGrad,
    FeatureLogPartitionWithGrad,
    LogPartition,
    LogPartitionGrad,
    LogPartitionHVP,
    LogPartitionWithGrad,
    log_partition,
)

__all__ = ["FeatureLogPartition", "FeatureLogPartitionGrad", "FeatureLogPartitionWithGrad",
           "LogPartition", "LogPartitionGrad", "LogPartitionHVP", "LogPartitionWithGrad",
           "log_partition"]
