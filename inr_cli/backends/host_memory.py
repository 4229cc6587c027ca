"""Backend memory as NumPy arrays in host memory: the reference's, the CPU engine's, and the CPU
emulation of the kernels' in tests."""

from __future__ import annotations

import numpy as np

from inr_cli.core.backend import Backend


class HostMemory(Backend):
    """The memory part of Backend (the operations are the engine's own)."""

    in_host_memory = True

    def empty(self, shape, dtype=np.float32):
        return np.empty(shape, dtype=dtype)

    def zeros(self, shape, dtype=np.float32):
        return np.zeros(shape, dtype=dtype)

    def to_device(self, array):
        return np.array(array, copy=True)

    def constant(self, array):
        return np.ascontiguousarray(array)

    def copy_from_host(self, out, array) -> None:
        out[...] = array

    def to_host(self, array) -> np.ndarray:
        return np.asarray(array)

    def copy(self, out, array) -> None:
        np.copyto(out, array)

    def host_reader(self):
        return np.asarray  # the operations ran as they were called: the array is the host's already

    def broadcast(self, array, networks: int):
        return np.broadcast_to(array, (networks, *array.shape[1:]))

    def synchronize(self) -> None:
        pass

    def memory_budget(self) -> int:
        """A fixed share of host memory."""
        return 2 << 30
