"""The kernels' cost model: what each kernel launch of a training step must move and compute, and the
time under which no kernel can do it on a given GPU (its floor).

The launches are the engine's own: a step of the real Trainer runs on LaunchRecorder, a KernelBackend
whose `launch` records the kernel's name, grid, block and arguments instead of running it, so the
shapes, plans, splits and groups are those the GPU runs. For each launch, COSTS[name] counts from the
kernel's code (kernels/*.cu, read with the launch's arguments):
  hbm      bytes that must cross between the GPU's memory and the chip: each operand read once, each
           result written once (what a perfect cache would leave);
  l2       bytes the SMs move to and from the L2 as the kernel is written: re-reads of a tile, 32-byte
           sectors for scattered 4- and 8-byte accesses, one sector per atomic;
  fp32     FP32 arithmetic (a fused multiply-add counts 2), tf32 the tensor cores' (2 per MAC);
  sfu      special-function results (sine, cosine, exponent, reciprocal, square root);
  atomics  atomic adds to global memory;
  shared   bytes the fused network's products read through shared memory (its banks' wavefronts of
           128 bytes: what its inner loops ask per multiply-add, SHARED_PER_MAC; the other kernels'
           are left out).
A launch's floor is the largest of those over the device's rate for each (DEVICES), the arithmetic
rates scaled by the share of SMs its grid can fill; its `bound` names which. A step's floor is the sum
of its launches'. The distance from the floor to a measured time is what a better kernel could win.

Beside the floor, a prediction: each launch's time at EFFICIENCY of each rate (what kernels of its kind
reach: bandwidth nearly, register-tiled FMAs about 60%, mma.sync fed from shared memory less) plus
LAUNCH_SECONDS for a kernel of a CUDA graph to start and drain. It is a guess to choose between
designs before a GPU times them, checked against the measured steps it is printed beside.

    PYTHONPATH=. python benchmarks/kernel_costs.py [--device H200] [--out benchmarks/results/kernel-costs-h200.json]

prints, for the benchmark settings of BENCHMARKS.md's H200 baseline, each kernel's counts and floor, each
step's floor beside the measured time, and the table of settings by their distance from the floor.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from inr_cli.backends.host_memory import HostMemory  # noqa: E402
from inr_cli.backends.kernel_backend import KernelBackend  # noqa: E402
from inr_cli.backends.launch import ACTIVATION_CODES  # noqa: E402

F = 4  # bytes of a float
SECTOR = 32  # bytes: the unit the L2 and the memory move


@dataclass(frozen=True)
class Device:
    """A GPU's limits. Sources: NVIDIA's H100 and H200 datasheets (SMs, HBM, FP32 and dense TF32
    tensor-core peaks: 67 and 494.7 TFLOPS on both, SXM); the CUDA C++ Programming Guide's
    throughput table for compute capability 9.0 (128 FP32 lanes and 16 special-function results per
    clock per SM; 32 shared-memory banks of 4 bytes); the L2's rate is measured by microbenchmarks
    only (about 5.5 TB/s on an H100 PCIe's 114 SMs at 1.755 GHz, chipsandcheese.com, "Nvidia's H100:
    Funny L2, and Tons of Bandwidth", 2023), scaled here to 132 SMs at 1.98 GHz; the atomic rate
    assumes one 32-byte sector operation a clock in each of the L2's 2 x 40 slices (not published:
    the GPU part measures it)."""

    name: str
    hbm: float  # bytes/s
    fp32: float  # FLOP/s
    tf32: float  # FLOP/s, dense
    sms: int = 132
    clock: float = 1.98e9
    l2: float = 5.5e12 * (132 / 114) * (1.98 / 1.755)
    l2_bytes: int = 50 << 20
    atomics: float = 80 * 1.98e9  # operations/s

    @property
    def sfu(self) -> float:
        return 16 * self.sms * self.clock

    @property
    def shared(self) -> float:
        return 128 * self.sms * self.clock  # bytes/s


DEVICES = {
    "H200": Device("H200", hbm=4.8e12, fp32=67e12, tf32=494.7e12),
    "H100": Device("H100", hbm=3.35e12, fp32=67e12, tf32=494.7e12),
}


@dataclass
class Cost:
    """What one launch must move and compute (see the module's docstring)."""

    hbm: float = 0.0
    l2: float = 0.0
    fp32: float = 0.0
    tf32: float = 0.0
    sfu: float = 0.0
    atomics: float = 0.0
    shared: float = 0.0
    blocks: int = 1

    def __add__(self, other: Cost) -> Cost:
        return Cost(*(getattr(self, f) + getattr(other, f) for f in RESOURCES), blocks=max(self.blocks, other.blocks))

    def times(self, device: Device) -> dict[str, float]:
        """Seconds each resource alone needs; an SM's resources on the share of SMs the grid fills."""
        fill = min(1.0, self.blocks / device.sms)
        return {"hbm": self.hbm / device.hbm, "l2": self.l2 / device.l2, "fp32": self.fp32 / (device.fp32 * fill),
                "tf32": self.tf32 / (device.tf32 * fill), "sfu": self.sfu / (device.sfu * fill),
                "atomics": self.atomics / device.atomics, "shared": self.shared / (device.shared * fill)}

    def floor(self, device: Device) -> tuple[float, str]:
        times = self.times(device)
        bound = max(times, key=times.get)
        return times[bound], bound

    def predicted(self, device: Device) -> float:
        """Seconds the launch is predicted to take (the module's docstring)."""
        times = self.times(device)
        return max(times[r] / EFFICIENCY[r] for r in times) + LAUNCH_SECONDS


RESOURCES = ("hbm", "l2", "fp32", "tf32", "sfu", "atomics", "shared")
# The share of each rate a well-written kernel of the engine's kinds reaches (the prediction's guess).
EFFICIENCY = {"hbm": 0.8, "l2": 0.6, "fp32": 0.6, "tf32": 0.4, "sfu": 0.5, "atomics": 0.5, "shared": 0.7}
LAUNCH_SECONDS = 2e-6


# ---- counts, one function per kernel, from its code and its launch's arguments ------------------------

def scalar(value) -> int | float:
    return value.item() if isinstance(value, np.generic) else value


def blocks(grid) -> int:
    return int(np.prod(grid))


def activation_sfu(kind: int) -> int:
    """Special-function results per activation (activation_math.cuh): sine one, sigmoid an exponent
    and a reciprocal."""
    return {ACTIVATION_CODES["sine"]: 1, ACTIVATION_CODES["sigmoid"]: 2}.get(kind, 0)


def derivative_sfu(kind: int) -> int:
    return 1 if kind == ACTIVATION_CODES["sine"] else 0


def fill(grid, block, args) -> Cost:
    n = scalar(args[2])
    return Cost(hbm=F * n, l2=F * n, blocks=blocks(grid))


def column_reduce(grid, block, args) -> Cost:
    _, _, rows, cols, _, _, _ = map(scalar, args)
    nets = grid[2]
    moved = F * nets * (rows * cols + grid[1] * cols)
    return Cost(hbm=moved, l2=moved, fp32=nets * rows * cols, blocks=blocks(grid))


def bias_activation(grid, block, args) -> Cost:
    z, _, _, networks, rows, cols, _, kind, _ = args
    n = scalar(networks) * scalar(rows) * scalar(cols)
    return Cost(hbm=3 * F * n, l2=3 * F * n, fp32=2 * n, sfu=activation_sfu(scalar(kind)) * n, blocks=blocks(grid))


def activation_backward(grid, block, args) -> Cost:
    n, kind = scalar(args[3]), scalar(args[4])
    return Cost(hbm=4 * F * n, l2=4 * F * n, fp32=3 * n, sfu=derivative_sfu(kind) * n, blocks=blocks(grid))


def fourier_features(grid, block, args) -> Cost:
    rows, m = scalar(args[2]), scalar(args[3])
    n = rows * m
    return Cost(hbm=3 * F * n, l2=3 * F * n, fp32=8 * n, sfu=2 * n, blocks=blocks(grid))


def mse_loss(grid, block, args) -> Cost:
    n = scalar(args[4]) * grid[1]
    return Cost(hbm=3 * F * n, l2=3 * F * n, fp32=4 * n, blocks=blocks(grid))


def sample_batch(grid, block, args) -> Cost:
    """Random pixels (sample_batch_u8 and _f32): each sample's targets a scattered read, a sector; its
    coordinates computed from the pixel's index; both written."""
    batch, out_f = scalar(args[5]), scalar(args[6])
    samples = batch * grid[1]
    written = F * samples * (2 + out_f)
    return Cost(hbm=SECTOR * samples + written, l2=SECTOR * samples + written, blocks=blocks(grid))


def advance_schedule(grid, block, args) -> Cost:
    return Cost(hbm=32, l2=32)


def adam_update(grid, block, args) -> Cost:
    """Reads parameter, gradient and both moments; writes parameter and moments."""
    n = scalar(args[4])
    return Cost(hbm=7 * F * n, l2=7 * F * n, fp32=12 * n, sfu=2 * n, blocks=blocks(grid))


def sgd_update(grid, block, args) -> Cost:
    n = scalar(args[3])
    return Cost(hbm=5 * F * n, l2=5 * F * n, fp32=4 * n, blocks=blocks(grid))


def hashgrid_zero(grid, block, args) -> Cost:
    n = scalar(args[1]) * grid[1]
    return Cost(hbm=F * n, l2=F * n, blocks=blocks(grid))


class HashGridLaunch(NamedTuple):
    """What a hash-grid launch works on, and how its kernel moves it (kernels/hashgrid.cu)."""

    points: int  # over all networks
    levels: int
    features: int
    entries: int  # a network's, all levels
    networks: int
    rows_map: bool  # _rows: a warp reads and writes whole rows of the encoding; else a sector a point
    vector: bool  # _f<F>: a corner's F features in one access (atomics too, but for _scalar)


def hashgrid_launch(name: str, args) -> HashGridLaunch:
    any_f = name.endswith("_any")
    values, levels = args[2], args[3]
    rows, n_levels = scalar(args[4]), scalar(args[5])
    features = scalar(args[6]) if any_f else int(re.search(r"_f(\d+)_", name).group(1))
    stride_tables = scalar(args[8 if any_f else 7])
    table = levels.get() if hasattr(levels, "get") else np.asarray(levels)  # a device array on the GPU
    # The vector accesses run where a network's tables are aligned to F floats (the first always is).
    aligned = stride_tables % features == 0 or values.shape[0] == 1
    return HashGridLaunch(rows * values.shape[0], n_levels, features, int(table[-1][1] + table[-1][2]),
                          values.shape[0], "_rows" in name, not any_f and aligned and features in (2, 4))


def hashgrid_rows_bytes(h: HashGridLaunch) -> float:
    """L2 bytes of reading (u, v) and reading or writing the level's F features, per point and level:
    the _rows kernels' warps take whole rows (a point's (u, v) read once for its levels); the others
    read (u, v) for each level and touch a sector of the encoding for each point and level."""
    if h.rows_map:
        return 2 * F / h.levels + F * h.features
    return 2 * F + SECTOR


def hashgrid_encode(name, grid, block, args) -> Cost:
    """Per point and level: its (u, v), four corners' features (a scattered read of F floats, one sector
    each: an entry's F floats never straddle one for F <= 8), the level's F features written."""
    h = hashgrid_launch(name, args)
    pl = h.points * h.levels
    hbm = F * (2 * h.points + h.features * h.entries * h.networks + h.features * pl)
    l2 = (4 * SECTOR + hashgrid_rows_bytes(h)) * pl
    return Cost(hbm=hbm, l2=l2, fp32=(4 * 2 * h.features + 20) * pl, blocks=blocks(grid))


def hashgrid_backward(name, grid, block, args) -> Cost:
    """Per point and level: (u, v), the level's F gradients, and an atomic add into each corner: one for
    its F features where the kernel adds them as a vector (red.global.add.v2/v4.f32), else one a
    feature; each a sector operation in the L2."""
    h = hashgrid_launch(name, args)
    pl = h.points * h.levels
    vector = h.vector and not name.endswith("_scalar")
    adds = 4 * pl * (1 if vector else h.features)
    hbm = F * (2 * h.points + h.features * pl + 2 * h.features * h.entries * h.networks)
    return Cost(hbm=hbm, l2=hashgrid_rows_bytes(h) * pl + SECTOR * adds, fp32=(4 * h.features + 20) * pl,
                atomics=adds, blocks=blocks(grid))


TILE_SHAPES = {"128x128": (128, 128), "128x64": (128, 64), "64x128": (64, 128), "256x8": (256, 8), "8x256": (8, 256)}


def matmul_family(name: str, grid, block, args) -> Cost:
    """C = A B over M x N x K for each network (grid.z networks, times splits for a plain matmul): the
    operands read once from memory; from the L2, A once for each column of tiles and B once for each
    row of tiles (a tile's K-slice is shared by its block). The fused epilogues read and write what
    they name: linear_forward the bias, z and a (2 M N written), linear_backward_input z and a of
    the layer before (2 M N read)."""
    tf32 = "_tf32_" in name
    tile = next(t for t in TILE_SHAPES if name.endswith(t) or f"_{t}_" in name)
    bm, bn = TILE_SHAPES[tile]
    if name.startswith("matmul"):
        m, n, k, splits = scalar(args[3]), scalar(args[4]), scalar(args[5]), scalar(args[7])
        shared_a, shared_b = scalar(args[8]) == 0, scalar(args[9]) == 0
        outputs, extra_read, sfu = splits, 0, 0
    else:
        m, n, k, kind = scalar(args[5]), scalar(args[6]), scalar(args[7]), scalar(args[8])
        splits = 1
        forward = name.startswith("linear_forward")
        shared_a = forward and scalar(args[10]) == 0  # x shared by every network
        shared_b = False
        outputs = 2 if forward else 1
        extra_read = 0 if forward else 2
        sfu = m * n * (activation_sfu(kind) if forward else derivative_sfu(kind))
    nets = grid[2] // splits
    tiles_m, tiles_n = -(-m // bm), -(-n // bn)
    a_bytes, b_bytes = F * m * k, F * k * n
    hbm = (a_bytes * (1 if shared_a else nets) + b_bytes * (1 if shared_b else nets)
           + F * m * n * nets * (outputs + extra_read))
    l2 = nets * (a_bytes * tiles_n + b_bytes * tiles_m + F * m * n * (outputs + extra_read))
    macs = 2 * m * n * k * nets
    # A product over the coordinates (K <= 2) stays FP32 under TF32; the thin tiles run FP32 units.
    on_tensor_cores = tf32 and tile in ("128x128", "128x64", "64x128")
    return Cost(hbm=hbm, l2=l2, fp32=0 if on_tensor_cores else macs, tf32=macs if on_tensor_cores else 0,
                sfu=sfu * nets, blocks=blocks(grid))


def fused_layers(args, backward: bool) -> list[tuple[int, int]]:
    """(in, out) of each layer of a fused stack, from network_forward's or network_backward's arguments."""
    at = 7 if backward else 5
    layers, in0, hidden, out = (scalar(a) for a in args[at:at + 4])
    return [(in0 if j == 0 else hidden, out if j == layers - 1 else hidden) for j in range(layers)]


# Bytes of shared-memory wavefronts (and, for the two kernels, L1 reads of the weights, through the same
# pipe) a product's multiply-add asks of each design's inner loop, counted per warp and k-step from
# fused_network.cu. Two kernels: FP32, a lane's 4 outputs of a 16x8 tile read 16 + 16 values per 8
# multiply-adds (A from shared memory, 8 rows a wavefront; B from the L1), 2 bytes a multiply-add; TF32,
# a fragment a tile (4 tiles of 16 rows, 2 of 8 columns), 0.375. One kernel: FP32, a thread's 4x4 outputs
# read as 8 float4s per 4 k (12 wavefronts a warp per 2048 multiply-adds), 0.75; TF32, a warp's 32x16
# outputs from 12 fragment loads per k-step of 4096 multiply-adds, a few 2-way bank conflicts, 0.45.
SHARED_PER_MAC = {("two-kernels", False): 2.0, ("two-kernels", True): 0.375, ("one-kernel", False): 0.75,
                  ("one-kernel", True): 0.45}


def network_forward(name: str, grid, block, args) -> Cost:
    """One chunk of rows a block: the input read once, each layer's z and a written once; the layer's
    weights read by every block (from the L2). Each layer's product in FP32 or on the tensor cores
    (the coordinates' layer, K <= 2, in FP32)."""
    layers = fused_layers(args, backward=False)
    rows, nets = scalar(args[-1]), grid[1]
    kinds = (scalar(args[9]), scalar(args[10]))
    params = sum(i * o + o for i, o in layers)
    shared_x = scalar(args[1]) == 0
    hbm = F * (rows * layers[0][0] * (1 if shared_x else nets) + nets * params
               + nets * rows * sum(2 * o for _, o in layers))
    l2 = hbm + F * nets * (grid[0] - 1) * params
    tf32 = name.endswith("_tf32")
    macs_fp32 = macs_tf32 = 0
    for i, o in layers:
        if tf32 and i > 2:
            macs_tf32 += 2 * rows * i * o * nets
        else:
            macs_fp32 += 2 * rows * i * o * nets
    sfu = nets * rows * sum(o * activation_sfu(kinds[j == len(layers) - 1]) for j, (_, o) in enumerate(layers))
    shared = (macs_fp32 * SHARED_PER_MAC["two-kernels", False] + macs_tf32 * SHARED_PER_MAC["two-kernels", True]) / 2
    return Cost(hbm=hbm, l2=l2, fp32=macs_fp32, tf32=macs_tf32, sfu=sfu, shared=shared, blocks=blocks(grid))


def network_backward(name: str, grid, block, args) -> Cost:
    """Per chunk: the output's gradient, z and a read; for each layer its input (a of the layer before,
    or x) and, for the derivative, z of the layer before; the weight gradient (rows x in x out) and the
    input gradient (except the first layer's, unless asked for) multiplied; each block's slot of
    weight gradients read and written once a chunk (from the L2), and written out at the end."""
    layers = fused_layers(args, backward=True)
    rows, nets, groups = scalar(args[-1]), grid[1], grid[0]
    kinds = (scalar(args[11]), scalar(args[12]))
    input_grad = scalar(args[-2]) != 0 if isinstance(args[-2], np.generic) else args[-2] is not None
    params = sum(i * o + o for i, o in layers)
    out = layers[-1][1]
    reads = rows * 3 * out + sum(rows * i for i, _ in layers) + sum(rows * i for i, _ in layers[1:])
    writes = rows * layers[0][0] if input_grad else 0
    chunks = -(-rows // rows_per_chunk(block))
    hbm = F * nets * (reads + writes + params + groups * params)
    l2 = hbm + F * nets * chunks * 3 * params  # the weights once a chunk; the slot read and written
    macs = sum(2 * rows * i * o for i, o in layers) + sum(2 * rows * i * o for i, o in layers[1:])
    if input_grad:
        macs += 2 * rows * layers[0][0] * layers[0][1]
    # Under TF32 the coordinates' layer (K <= 2) stays FP32: its weight gradient and input gradient.
    first_fp32 = 2 * rows * layers[0][0] * layers[0][1] * (2 if input_grad else 1) if layers[0][0] <= 2 else 0
    macs_tf32 = (macs - first_fp32) * nets if name.endswith("_tf32") else 0
    bias_sums = nets * rows * sum(o for _, o in layers)
    sfu = nets * rows * (out * derivative_sfu(kinds[1]) + sum(i * derivative_sfu(kinds[0]) for i, _ in layers[1:]))
    shared = ((macs * nets - macs_tf32) * SHARED_PER_MAC["two-kernels", False]
              + macs_tf32 * SHARED_PER_MAC["two-kernels", True]) / 2
    return Cost(hbm=hbm, l2=l2, fp32=macs * nets - macs_tf32 + bias_sums, tf32=macs_tf32, sfu=sfu, shared=shared,
                blocks=blocks(grid))


def network_train(name: str, grid, block, args) -> Cost:
    """One kernel a step: per network the input (once, where the networks share it) and the targets
    read, the weights read by every block (from the L2 after the first), each block's gradient sums and
    share of the loss written once, the gradient at the stack's input written (and z before it read)
    where asked for; nothing else leaves the chip. Multiplied: each layer forward, its weight gradient,
    and its input gradient (but the first layer's, unless asked for); the hidden-to-hidden layers on the
    tensor cores under TF32 (unless no wider than the coordinates), the first and last layers' and
    every FP32 product in FP32 FMAs; the bias gradients' sums. Special functions: each activation and,
    for a sine, its derivative (a cosine)."""
    layers_n, in0, hidden, out = (scalar(a) for a in args[7:11])
    hidden_kind, out_kind = scalar(args[12]), scalar(args[13])
    rows, groups, nets = scalar(args[24]), grid[0], grid[1]
    layers = [(in0 if j == 0 else hidden, out if j == layers_n - 1 else hidden) for j in range(layers_n)]
    input_grad = scalar(args[23]) != 0 if isinstance(args[23], np.generic) else args[23] is not None
    z_in = scalar(args[21]) != 0 if isinstance(args[21], np.generic) else args[21] is not None
    params = sum(i * o + o for i, o in layers)
    shared_x = scalar(args[1]) == 0
    hbm = F * (rows * in0 * (1 if shared_x else nets) + nets * rows * out + nets * params
               + nets * groups * (params + 1) + nets * rows * in0 * (int(input_grad) + int(z_in)))
    l2 = hbm + F * nets * (groups - 1) * params
    tf32 = name.endswith("_tf32") and hidden > 2
    macs_fp32 = macs_tf32 = 0
    for j, (i, o) in enumerate(layers):
        products = 3 if j > 0 or input_grad else 2
        if tf32 and 0 < j < layers_n - 1:
            macs_tf32 += products * rows * i * o * nets
        else:
            macs_fp32 += products * rows * i * o * nets
    bias_sums = nets * rows * sum(o for _, o in layers)
    per_row = sum(o * (activation_sfu(hidden_kind) + derivative_sfu(hidden_kind)) for _, o in layers[:-1])
    sfu = nets * rows * (per_row + out * (activation_sfu(out_kind) + derivative_sfu(out_kind)))
    shared = macs_fp32 * SHARED_PER_MAC["one-kernel", False] + macs_tf32 * SHARED_PER_MAC["one-kernel", True]
    return Cost(hbm=hbm, l2=l2, fp32=2 * macs_fp32 + bias_sums, tf32=2 * macs_tf32, sfu=sfu, shared=shared,
                blocks=blocks(grid))


def rows_per_chunk(block) -> int:
    """A fused block of 2 WIDTH threads carries min(64, 4096 / WIDTH) rows (constants.cuh)."""
    from inr_cli.backends.launch import CONSTANTS

    width = block[0] // 2
    return min(CONSTANTS["FUSED_MAX_ROWS"], CONSTANTS["FUSED_ROW_ELEMENTS"] // width)


COSTS = {"fill": fill, "column_reduce": column_reduce, "bias_activation": bias_activation,
         "activation_backward": activation_backward, "fourier_features": fourier_features, "mse_loss": mse_loss,
         "sample_batch_u8": sample_batch, "sample_batch_f32": sample_batch, "advance_schedule": advance_schedule,
         "adam_update": adam_update, "sgd_update": sgd_update, "hashgrid_zero": hashgrid_zero}


def cost_of(name: str, grid, block, args) -> Cost:
    if name in COSTS:
        return COSTS[name](grid, block, args)
    if name.startswith("hashgrid_encode_"):
        return hashgrid_encode(name, grid, block, args)
    if name.startswith("hashgrid_backward_"):
        return hashgrid_backward(name, grid, block, args)
    if name.startswith(("matmul_", "linear_forward_", "linear_backward_input_")):
        return matmul_family(name, grid, block, args)
    if name.startswith("network_forward_"):
        return network_forward(name, grid, block, args)
    if name.startswith("network_backward_"):
        return network_backward(name, grid, block, args)
    if name.startswith("network_train_"):
        return network_train(name, grid, block, args)
    raise KeyError(f"no cost model for kernel {name!r}: add one to benchmarks/kernel_costs.py")


# ---- the launches of a step ----------------------------------------------------------------------

class LaunchRecorder(HostMemory, KernelBackend):
    """A KernelBackend that records each launch instead of running it: the GPU's launch plans (an
    H200's SM count), the step's buffers allocated on the host and never written."""

    name = "recorder"

    def __init__(self, precision: str = "fp32", fused: bool = True, sm_count: int = 132):
        super().__init__(precision, fused)
        self.sm_count = sm_count
        self.launches: list[tuple[str, tuple, tuple, tuple]] = []

    def launch(self, name: str, grid, block, args, shared: int = 0) -> None:
        self.launches.append((name, tuple(grid), tuple(block), tuple(args)))


def blank_image(size: int, channels: int):
    from inr_cli.core.pixels import PixelImage

    names = ("l",) if channels == 1 else ("r", "g", "b")
    return PixelImage(np.full((size, size, channels), 0.5, np.float32), names)


@dataclass(frozen=True)
class Setting:
    """A benchmark setting of BENCHMARKS.md's H200 baseline: a step of `networks` networks on images of
    `size` px (`flags` as the command line's), timed at `measured_ms` at 9651ce0."""

    name: str
    preset: str
    size: int
    channels: int
    flags: dict = field(default_factory=dict)
    networks: int = 1
    precision: str = "fp32"
    fused: bool = True
    measured_ms: float | None = None
    peer: str = ""
    hashgrid: str = "rows"  # the hash grid's kernels (launch.HASHGRID_VARIANTS)
    fused_variant: str = "two-kernels"  # the fused network's design (launch.FUSED_VARIANTS)


SIREN_PAPER = dict(omega0=30.0, lr=1e-4)
SIGMOID_2X64 = dict(hidden=64, layers=2, encoding="none", lr=1e-3)
PACK_3X64 = dict(hidden=64, layers=3, **SIREN_PAPER)
SETTINGS = [
    # The fused network's two kernels (the engine's, the baseline's) and one kernel a step (waits for a GPU).
    Setting("sigmoid 2x64, 200x200 grey, fused", "sigmoid", 200, 1, SIGMOID_2X64, measured_ms=0.283,
            peer="PyTorch eager 1.547"),
    Setting("sigmoid 2x64, 200x200 grey, fused, one kernel", "sigmoid", 200, 1, SIGMOID_2X64,
            peer="goal 0.077 (20x PyTorch eager)", fused_variant="one-kernel"),
    Setting("sigmoid 2x64, 200x200 grey, layer by layer", "sigmoid", 200, 1, SIGMOID_2X64, fused=False,
            measured_ms=0.222),
    Setting("2048 SIREN 3x64, 32x32, fused", "siren", 32, 3, PACK_3X64, networks=2048, measured_ms=10.73,
            peer="PyTorch batched 10.88"),
    Setting("2048 SIREN 3x64, 32x32, fused TF32", "siren", 32, 3, PACK_3X64, networks=2048, precision="tf32",
            measured_ms=8.91),
    Setting("2048 SIREN 3x64, 32x32, fused, one kernel", "siren", 32, 3, PACK_3X64, networks=2048,
            peer="goal 3.6 (3x PyTorch batched)", fused_variant="one-kernel"),
    Setting("2048 SIREN 3x64, 32x32, fused TF32, one kernel", "siren", 32, 3, PACK_3X64, networks=2048,
            precision="tf32", fused_variant="one-kernel"),
    Setting("2048 SIREN 3x64, 32x32, layer by layer", "siren", 32, 3, dict(hidden=64, layers=3, **SIREN_PAPER),
            networks=2048, fused=False, measured_ms=10.38),
    Setting("SIREN 3x256, 512x512, FP32", "siren", 512, 3, dict(hidden=256, layers=3, **SIREN_PAPER),
            measured_ms=7.05, peer="PyTorch eager 7.75"),
    Setting("SIREN 3x256, 512x512, TF32", "siren", 512, 3, dict(hidden=256, layers=3, **SIREN_PAPER),
            precision="tf32", measured_ms=4.34, peer="torch.compile TF32 2.81"),
    # fit-many's pack of 2048 at 64 px (--pack 2048): 97.5 images/s over 500 steps is 21.0 ms a step
    Setting("fit-many pack, 2048 SIREN 3x64, 64x64", "sets", 64, 3, dict(hidden=64, layers=3, lr=1e-3),
            networks=2048, measured_ms=2048 / 97.5 / 500 * 1e3, peer="PyTorch batched 88.2 images/s"),
    Setting("fit-many pack, 2048 SIREN 3x64, 64x64, one kernel", "sets", 64, 3, dict(hidden=64, layers=3, lr=1e-3),
            networks=2048, peer="goal 15.5 (3x PyTorch batched, 264.6 images/s)", fused_variant="one-kernel"),
    # The baseline ran the kernels now called hashgrid_*_any, on tables of 2^19 entries (the preset's
    # then; it now sizes them to the image); each variant after it waits for a GPU.
    Setting("hash grid, 2^18 samples, 16 levels, ReLU 2x64 (768 px)", "hashgrid", 768, 3, dict(hash_log2_size=19),
            measured_ms=2.84, peer="goal 1.0 ms", hashgrid="any"),
    *(Setting(f"hash grid, 2^18 samples, 16 levels, ReLU 2x64 (768 px), {variant} kernels", "hashgrid", 768, 3,
              dict(hash_log2_size=19), peer="goal 1.0 ms", hashgrid=variant)
      for variant in ("rows", "levels", "rows-scalar")),
    Setting("hash grid, 2^18 samples, 16 levels, ReLU 2x64 (768 px), rows kernels, one kernel", "hashgrid", 768, 3,
            dict(hash_log2_size=19), peer="goal 1.0 ms", fused_variant="one-kernel"),
]


def record_step(setting: Setting) -> LaunchRecorder:
    """The launches of one training step of `setting` (the second: the first allocates)."""
    from benchmarks.common import configure, make_trainer

    config = configure(setting.preset, setting.size, steps=1000, **setting.flags)
    backend = LaunchRecorder(setting.precision, setting.fused)
    backend.hashgrid_variant, backend.fused_variant = setting.hashgrid, setting.fused_variant
    image = blank_image(setting.size, setting.channels)
    trainer = make_trainer(backend, config, [image] * setting.networks, seeds=range(setting.networks))
    trainer.step()
    backend.launches.clear()
    trainer.step()
    return backend


def product_launches(m: int, n: int, k: int, op: str, precision: str = "fp32") -> LaunchRecorder:
    """The launches of one product C (m x n) = op(A) op(B) over k."""
    backend = LaunchRecorder(precision)
    a = np.empty((1, k, m) if op[0] == "t" else (1, m, k), np.float32)
    b = np.empty((1, n, k) if op[1] == "t" else (1, k, n), np.float32)
    backend.matmul(a, b, np.empty((1, m, n), np.float32), op[0] == "t", op[1] == "t")
    return backend


def kernel_table(launches, device: Device) -> list[dict]:
    """One row per kernel name: launches, summed counts, floor and what bounds it (the bound of the
    launch that contributes most)."""
    by_name: dict[str, list] = defaultdict(list)
    for name, grid, block, args in launches:
        by_name[name].append(cost_of(name, grid, block, args))
    rows = []
    for name, costs in by_name.items():
        floors = [c.floor(device) for c in costs]
        total = Cost()
        for c in costs:
            total = total + c
        rows.append({"kernel": name, "launches": len(costs), "floor_ms": sum(f for f, _ in floors) * 1e3,
                     "predicted_ms": sum(c.predicted(device) for c in costs) * 1e3,
                     "bound": max(floors)[1], "hbm_mb": total.hbm / 1e6, "l2_mb": total.l2 / 1e6,
                     "gflop_fp32": total.fp32 / 1e9, "gflop_tf32": total.tf32 / 1e9, "sfu_m": total.sfu / 1e6,
                     "atomics_m": total.atomics / 1e6, "shared_gb": total.shared / 1e9})
    return sorted(rows, key=lambda r: -r["floor_ms"])


def model(device: Device, settings=SETTINGS) -> dict:
    results = []
    for setting in settings:
        launches = record_step(setting).launches
        kernels = kernel_table(launches, device)
        floor = sum(k["floor_ms"] for k in kernels)
        results.append({"setting": setting.name, "launches": len(launches), "floor_ms": floor,
                        "predicted_ms": sum(k["predicted_ms"] for k in kernels),
                        "measured_ms": setting.measured_ms, "peer": setting.peer,
                        "times_floor": setting.measured_ms / floor if setting.measured_ms else None,
                        "hashgrid": setting.hashgrid if setting.preset == "hashgrid" else None,
                        "fused_variant": setting.fused_variant if setting.fused else None, "kernels": kernels})
    products = []
    for op, cublas, ours in (("nt", 0.753, 0.931), ("nn", 0.749, 0.935)):
        kernels = kernel_table(product_launches(262144, 256, 256, op).launches, device)
        floor = sum(k["floor_ms"] for k in kernels)
        products.append({"setting": f"matmul 262144 x 256 x 256 {op}, FP32", "floor_ms": floor,
                         "predicted_ms": sum(k["predicted_ms"] for k in kernels), "measured_ms": ours,
                         "cublas_ms": cublas, "times_floor": ours / floor, "cublas_times_floor": cublas / floor,
                         "kernels": kernels})
    return {"device": asdict(device), "steps": results, "products": products}


def markdown(result: dict) -> str:
    lines = ["| setting | launches | floor (ms) | bound by | predicted (ms) | measured (ms) | measured / floor |",
             "| --- | ---: | ---: | --- | ---: | ---: | ---: |"]
    for r in sorted(result["steps"] + result["products"], key=lambda r: -(r["times_floor"] or 0)):
        top = r["kernels"][0]
        measured = (f"{r['measured_ms']:.3f} | {r['times_floor']:.1f}x" if r["measured_ms"] else
                    "waits for a GPU | -")
        lines.append(f"| {r['setting']} | {r.get('launches', 1)} | {r['floor_ms']:.3f} | {top['kernel']} "
                     f"({top['bound']}) | {r['predicted_ms']:.3f} | {measured} |")
    lines += ["", "| setting | kernel | launches | floor (ms) | bound | predicted (ms) | HBM MB | L2 MB | GFLOP FP32 "
                  "| GFLOP TF32 | SFU M | atomics M | shared GB |",
              "| --- | --- " + "| ---: " * 2 + "| --- " + "| ---: " * 8 + "|"]
    for r in result["steps"] + result["products"]:
        for k in r["kernels"]:
            lines.append(f"| {r['setting']} | {k['kernel']} | {k['launches']} | {k['floor_ms']:.4f} | {k['bound']} | "
                         f"{k['predicted_ms']:.4f} | {k['hbm_mb']:.1f} | {k['l2_mb']:.1f} | {k['gflop_fp32']:.2f} | "
                         f"{k['gflop_tf32']:.2f} | {k['sfu_m']:.1f} | {k['atomics_m']:.1f} | {k['shared_gb']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=sorted(DEVICES), default="H200")
    parser.add_argument("--out", type=Path, help="write the model's figures as JSON here")
    args = parser.parse_args()
    result = model(DEVICES[args.device])
    print(markdown(result))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
