"""The GPU backend: our kernels from kernels/, compiled once by CuPy's RawModule, on one stream.

Everything runs on the backend's own non-blocking stream, so a training step can be captured as a
CUDA graph (`compile_step`) and replayed with a single launch. `matmul="cublas"` swaps our matmul
for CuPy's cuBLAS path, for comparison only; `fused=False` trains a narrow network layer by layer
instead of in the fused kernels (fused_pass.py), for comparison too.
"""

from __future__ import annotations

import numpy as np

from inr_cli.backends.kernel_backend import KernelBackend
from inr_cli.resources import kernels_dir

COMPILE_OPTIONS = ("-std=c++17",)


# Compiled only when a narrow network first trains: the fused kernels take longer to compile than
# all the others together, and a wide network never runs them.
FUSED_NETWORK_SOURCE = "fused_network.cu"


def kernel_sources() -> list:
    return sorted(kernels_dir().glob("*.cu"))


def module_source(paths) -> str:
    """The kernel files as one source text, their shared headers inlined once at the top
    (constants.cuh first: the others use it).

    Inlined rather than #included so that CuPy's on-disk cache, keyed on the source text, sees
    every change to a header."""
    headers = sorted(kernels_dir().glob("*.cuh"), key=lambda h: (h.name != "constants.cuh", h.name))
    parts = [f"// ---- {path.name}\n" + "\n".join(
        line for line in path.read_text().replace("#pragma once", "").splitlines() if not line.startswith('#include "'))
        for path in [*headers, *paths]]
    return "\n".join(parts)


def load_module(defines: dict | None = None, fused: bool = False):
    """The kernel files as one RawModule, the fused network's alone (fused) or all the others; CuPy
    caches the compiled binary on disk per machine. `defines` overrides compile-time knobs (e.g.
    MATMUL_MIN_BLOCKS) for experiments in dev/."""
    import cupy

    options = COMPILE_OPTIONS + tuple(f"-D{k}={v}" for k, v in (defines or {}).items())
    paths = [p for p in kernel_sources() if (p.name == FUSED_NETWORK_SOURCE) == fused]
    return cupy.RawModule(code=module_source(paths), options=options)


def compile_all_kernels() -> list[tuple[str, str]]:
    """(file, "ok" or the compiler's first line) for each kernel file: for `inr doctor`."""
    import cupy

    results = []
    for path in kernel_sources():
        try:
            cupy.RawModule(code=module_source([path]), options=COMPILE_OPTIONS).compile()
            results.append((path.name, "ok"))
        except Exception as exc:  # the compiler's message is what the user needs
            results.append((path.name, f"FAILED: {str(exc).strip().splitlines()[0]}"))
    return results


class CudaBackend(KernelBackend):
    name = "gpu"

    def __init__(self, matmul: str = "kernel", defines: dict | None = None, precision: str = "fp32",
                 fused: bool = True):
        # cuBLAS is compared layer by layer, so it never runs the fused kernels; it multiplies in FP32
        # only (config.validate refuses the settings that would ask otherwise).
        if matmul == "cublas" and precision != "fp32":
            raise ValueError(f"matmul cublas multiplies in FP32 only, not {precision}")
        super().__init__(precision, fused and matmul != "cublas")
        import cupy

        self._cupy = cupy
        # Every launch and copy names this stream explicitly: several backends may live in one
        # process (kernel and cuBLAS paths in the benchmark), so the thread's current stream is
        # never relied on.
        self.stream = cupy.cuda.Stream(non_blocking=True)
        self.defines = defines
        self.module = load_module(defines)
        self.fused_module = None  # compiled at the first fused launch
        self._functions: dict = {}
        self._shared_allowed: dict[str, int] = {}  # dynamic shared memory each kernel is let have, past 48 KB
        attributes = cupy.cuda.Device().attributes
        self.sm_count = attributes["MultiProcessorCount"]
        self.shared_per_block = attributes["MaxSharedMemoryPerBlockOptin"]
        self.use_cublas = matmul == "cublas"
        self._reading_stream = None  # host_reader's, made at its first call

    # --- memory ------------------------------------------------------------------------------------
    def empty(self, shape, dtype=np.float32):
        with self.stream:  # from this stream's pool arena, like every array we launch on
            return self._cupy.empty(shape, dtype=dtype)

    def zeros(self, shape, dtype=np.float32):
        with self.stream:
            return self._cupy.zeros(shape, dtype=dtype)

    def to_device(self, array):
        with self.stream:
            return self._cupy.asarray(np.ascontiguousarray(array))

    def copy_from_host(self, out, array) -> None:
        # On our stream: `out[...] = device_array` would run CuPy's copy kernel on the null stream,
        # which a non-blocking stream does not wait for, so the next kernel could read stale values.
        out.set(np.ascontiguousarray(array, dtype=out.dtype), stream=self.stream)

    def to_host(self, array) -> np.ndarray:
        return self._cupy.asnumpy(array, stream=self.stream)  # waits for the stream: a sync point

    def copy(self, out, array) -> None:
        out.data.copy_from_device_async(array.data, array.nbytes, stream=self.stream)

    def host_reader(self):
        # The reads go through a stream of their own that waits for what was launched so far: on the
        # loop's stream they would wait for its later steps, or be captured into its graph.
        if self._reading_stream is None:
            self._reading_stream = self._cupy.cuda.Stream(non_blocking=True)
        stream, launched = self._reading_stream, self.stream.record()

        def read(array) -> np.ndarray:
            stream.wait_event(launched)
            return self._cupy.asnumpy(array, stream=stream)  # waits for the copy

        return read

    def broadcast(self, array, networks: int):
        return self._cupy.broadcast_to(array, (networks, *array.shape[1:]))

    def synchronize(self) -> None:
        self.stream.synchronize()

    def free_memory(self) -> int:
        """Bytes the device has free, counting what CuPy's pool holds but does not use."""
        pool = self._cupy.get_default_memory_pool()
        return int(self._cupy.cuda.runtime.memGetInfo()[0] + pool.free_bytes())

    def memory_budget(self) -> int:
        """Half of what the device has free: the rest for rendering, scoring and other processes."""
        return self.free_memory() // 2

    # --- kernels -----------------------------------------------------------------------------------
    def launch(self, name: str, grid, block, args, shared: int = 0) -> None:
        function = self._functions.get(name)
        if function is None:
            module = self.module
            if name.startswith("network_"):  # fused_network.cu's kernels
                if self.fused_module is None:
                    self.fused_module = load_module(self.defines, fused=True)
                module = self.fused_module
            function = self._functions[name] = module.get_function(name)
        if shared > self._shared_allowed.get(name, 48 * 1024):  # past 48 KB a kernel must be let have more
            function.max_dynamic_shared_size_bytes = self._shared_allowed[name] = shared
        function(tuple(grid), tuple(block), args, stream=self.stream, shared_mem=shared)

    def matmul(self, a, b, out, trans_a: bool = False, trans_b: bool = False) -> None:
        if self.use_cublas:
            with self.stream:  # batched over networks: cuBLAS's strided-batched GEMM
                self._cupy.matmul(a.swapaxes(1, 2) if trans_a else a, b.swapaxes(1, 2) if trans_b else b, out=out)
        else:
            super().matmul(a, b, out, trans_a, trans_b)

    # With --matmul cublas every product goes through cuBLAS, so the fused layer kernels give way to
    # the composition they fuse (matmul, then the activation kernel), as the NumPy backend defines it.
    def linear_forward(self, x, weight, bias, z, a, activation: str, omega0: float = 1.0) -> None:
        if not self.use_cublas:
            return super().linear_forward(x, weight, bias, z, a, activation, omega0)
        self.matmul(x, weight, z, trans_b=True)
        self.bias_activation(z, bias, a, activation, omega0)

    def linear_backward_input(self, grad, weight, z_prev, a_prev, out, activation_prev: str,
                              omega0: float = 1.0) -> None:
        if not self.use_cublas:
            return super().linear_backward_input(grad, weight, z_prev, a_prev, out, activation_prev, omega0)
        self.matmul(grad, weight, out)
        self.activation_backward(out, z_prev, a_prev, activation_prev, omega0)

    def compile_step(self, step):
        return GraphStep(self, step)


class GraphStep:
    """Run a training step eagerly once (allocating its scratch buffers), capture the second as a
    CUDA graph, and replay that graph from then on. Falls back to eager launches if capture fails."""

    def __init__(self, backend: CudaBackend, step):
        self.backend = backend
        self.step = step
        self.calls = 0
        self.graph = None
        self.failed = None

    def __call__(self) -> None:
        self.calls += 1
        if self.graph is not None:
            self.graph.launch(self.backend.stream)
            return
        if self.calls == 1 or self.failed is not None:
            self.step()
            return
        stream = self.backend.stream
        try:
            stream.begin_capture()
            try:
                self.step()
            finally:
                graph = stream.end_capture()
        except Exception as exc:  # capture unsupported here: eager launches still work
            self.failed = exc
            self.step()
            return
        self.graph = graph
        self.graph.launch(stream)
