"""The training state of N networks: what a trainer starts from and hands back, and what a
checkpoint (formats/checkpoint.py) stores."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inr_cli.core.network import NetworkSpec, init_networks


@dataclass
class TrainingState:
    """Everything a run needs to go on, for N networks: the trainer starts from one and hands one
    back, and a checkpoint stores one. Mini-batches are a pure function of (seed, step), so the
    step is the whole random-generator state."""

    # Each [N, P] array a host array, or where a checkpoint is read for a resume, its values left in the
    # file until the trainer takes them (formats/checkpoint.StoredArray); a checkpoint being written may
    # hold the trainer's device arrays.
    params: np.ndarray  # [N, P] float32
    moment1: np.ndarray | None  # [N, P]: Adam's m, or the SGD momentum buffer; None: zeros (a fresh run)
    moment2: np.ndarray | None  # [N, P]: Adam's v (zeros for SGD); None: zeros
    step: int  # updates done
    seconds: float  # training time so far
    loss: np.ndarray  # [N] float64: each network's loss when last read (NaN before the first read)

    @classmethod
    def fresh(cls, spec: NetworkSpec, seeds, output_means=None, weight_scale: float = 1.0) -> "TrainingState":
        """Step 0: network i initialised from seeds[i] (its outputs at output_means[i] if given, see
        network.output_means; its hidden weights scaled by weight_scale); the moments start at zero."""
        return cls(init_networks(spec, seeds, output_means, weight_scale), None, None, 0, 0.0,
                   np.full(len(seeds), np.nan))

    @property
    def networks(self) -> int:
        return self.params.shape[0]


# A run's checkpoints wait for the writer as snapshots of the state (the parameters and both moments,
# float32) where the trainer runs (runs/snapshots.py): a model whose snapshot takes up to this many
# bytes keeps two, a larger one one, or none where the trainer's arrays are host memory (its
# checkpoints are then written from them while the steps wait: three more copies of a large model
# would be host memory too).
SMALL_SNAPSHOT_BYTES = 64 << 20


def snapshot_count(parameters: int, in_host_memory: bool) -> int:
    """How many snapshots a run of `parameters` parameters (all its networks') keeps."""
    if 3 * 4 * parameters <= SMALL_SNAPSHOT_BYTES:
        return 2
    return 0 if in_host_memory else 1
