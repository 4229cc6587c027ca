"""Launch configurations for the kernels in kernels/: pure arithmetic on shapes.

Shared by the CUDA backend and the CPU emulation used in tests, so the grids, tile choices and
split-K plans that run on the GPU are the ones the tests check against NumPy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from inr_cli.core.models import ACTIVATIONS
from inr_cli.resources import kernels_dir


def read_defines(text: str) -> dict[str, int]:
    """The integer #defines of a C header."""
    return {name: int(value) for name, value in re.findall(r"^#define (\w+) (-?\d+)\b", text, re.M)}


# Numbers the kernels and this file share, written once in kernels/constants.cuh.
CONSTANTS = read_defines((kernels_dir() / "constants.cuh").read_text())
ACTIVATION_CODES = {name: CONSTANTS[f"ACT_{name.upper()}"] for name in ACTIVATIONS}
REDUCE_TX, REDUCE_TY = CONSTANTS["REDUCE_TX"], CONSTANTS["REDUCE_TY"]
LOSS_THREADS = CONSTANTS["LOSS_THREADS"]
FUSED_WIDTHS = tuple(w for w in (16, 32, 64, 128) if w <= CONSTANTS["FUSED_MAX_WIDTH"])  # as fused_network.cu

THREADS = 256  # block size of the elementwise kernels (any size works: grid-stride loops)
MAX_GRID = 4096  # grid-stride loops cover the rest
MAX_GRID_Z = 65535  # CUDA's limit on gridDim.y and gridDim.z: more networks take more launches
REDUCE_MIN_ROWS_PER_BLOCK = 512
REDUCE_MAX_ROW_BLOCKS = 128
LOSS_MAX_BLOCKS = 1024


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def elementwise_grid(n: int, max_blocks: int = MAX_GRID, threads: int = THREADS,
                     networks: int = 1) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """A 1-D grid over n elements (per network, with networks > 1: grid.y is the network)."""
    return (max(1, min(ceil_div(n, threads), max_blocks)), networks, 1), (threads, 1, 1)


def network_groups(networks: int, per_network_blocks: int = 1):
    """(first, stop) ranges of networks small enough for one launch's gridDim.z (or .y)."""
    step = max(1, MAX_GRID_Z // per_network_blocks)
    return [(first, min(networks, first + step)) for first in range(0, networks, step)]


@dataclass(frozen=True)
class ReducePlan:
    row_blocks: int
    rows_per_block: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int] = (REDUCE_TX, REDUCE_TY, 1)


def plan_column_reduce(rows: int, cols: int) -> ReducePlan:
    """One pass when rows are few; else row_blocks partial rows, summed by a second pass.
    Per network: grid.z (networks) is the caller's."""
    row_blocks = max(1, min(REDUCE_MAX_ROW_BLOCKS, rows // REDUCE_MIN_ROWS_PER_BLOCK))
    rows_per_block = ceil_div(rows, row_blocks)
    row_blocks = ceil_div(rows, rows_per_block)
    return ReducePlan(row_blocks, rows_per_block, (ceil_div(cols, REDUCE_TX), row_blocks, 1))


@dataclass(frozen=True)
class Tile:
    name: str  # its shape, BM x BN
    bm: int
    bn: int
    bk: int
    threads: int
    prefix: str = ""  # "tf32_": the kernels that run it in TF32

    @property
    def kernel_tile(self) -> str:
        """How the kernels' names call it: matmul_<kernel_tile>_nt, linear_forward_<kernel_tile>."""
        return self.prefix + self.name


# As instantiated at the end of kernels/matmul.cu, for each precision (training.precision).
TILES = {
    "128x128": Tile("128x128", 128, 128, 16, 256),
    "128x64": Tile("128x64", 128, 64, 16, 256),
    "64x128": Tile("64x128", 64, 128, 16, 256),
    "256x8": Tile("256x8", 256, 8, 16, 256),
    "8x256": Tile("8x256", 8, 256, 16, 256),
}
TILES_BY_PRECISION = {"fp32": TILES, "tf32": {name: replace(tile, prefix="tf32_") for name, tile in TILES.items()}}


@dataclass(frozen=True)
class MatmulPlan:
    kernel: str
    tile: Tile
    splits: int
    k_per_split: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]


def choose_tile(m: int, n: int) -> Tile:
    if n <= 8:
        return TILES["256x8"]
    if m <= 8:
        return TILES["8x256"]
    if n <= 64:
        return TILES["128x64"]
    if m <= 64:
        return TILES["64x128"]
    return TILES["128x128"]


def plan_matmul(m: int, n: int, k: int, trans_a: bool, trans_b: bool, sm_count: int,
                min_k_per_split: int = 256, fused: str | None = None, precision: str = "fp32") -> MatmulPlan:
    """Tile by shape; split K when the output alone has too few tiles to fill the GPU.

    The plan is one network's: grid.z holds its splits, and a launch for N networks multiplies it
    by N. It does not depend on N, so a network's sums are added in the same order whichever pack
    it is trained in, and its result is the same bits.
    fused: "linear_forward" or "linear_backward_input" names the kernel with a fused epilogue
    (never split: the epilogue needs the whole sum). precision: "fp32" or "tf32", the kernels of
    that precision on the same tiles; a product over the coordinates alone (k <= FP32_MAX_K) stays
    FP32 (numpy_ops.tf32_rounds)."""
    if trans_a and trans_b:
        raise ValueError("matmul with both operands transposed is not needed and not provided")
    if k <= CONSTANTS["FP32_MAX_K"]:
        precision = "fp32"
    tile = TILES_BY_PRECISION[precision][choose_tile(m, n).name]
    tiles = ceil_div(m, tile.bm) * ceil_div(n, tile.bn)
    wanted = ceil_div(2 * sm_count, tiles) if tiles < 2 * sm_count else 1
    splits = 1 if fused else max(1, min(wanted, k // min_k_per_split))
    k_per_split = ceil_div(ceil_div(k, splits), tile.bk) * tile.bk
    splits = ceil_div(k, k_per_split) if k > 0 else 1
    kernel = (f"{fused}_{tile.kernel_tile}" if fused
              else f"matmul_{tile.kernel_tile}_{'t' if trans_a else 'n'}{'t' if trans_b else 'n'}")
    grid = (ceil_div(n, tile.bn), ceil_div(m, tile.bm), splits)
    return MatmulPlan(kernel, tile, splits, k_per_split, grid, (tile.threads, 1, 1))


FUSED_MAX_GROUPS = 256
# A network's backward blocks each keep a slot of weight gradients; their number is held so that the
# slots take at most this share of the memory its activations take (a pack of many networks on small
# images then needs one slot each, written straight into the gradients).
FUSED_PARTIAL_SHARE = 8

# The fused kernels' two designs (fused_network.cu). "two-kernels": network_forward then network_backward,
# each layer's z and a through global memory, the engine's (the first is the default); "one-kernel":
# network_train, the whole pass in one launch with every activation on the chip, chosen by
# backend.fused_variant where its shared memory fits the device (else the two kernels run), to be timed
# beside the two before it becomes the default.
FUSED_VARIANTS = ("two-kernels", "one-kernel")
FUSED_TRAIN_THREADS = CONSTANTS["FUSED_TRAIN_THREADS"]
# The most dynamic shared memory a block may take: sm_90's (the CUDA backend asks its device).
SHARED_PER_BLOCK = 227 * 1024


@dataclass(frozen=True)
class FusedPlan:
    """How kernels/fused_network.cu runs a network's layers `first` .. the last (its "stack")."""
    variant: str  # FUSED_VARIANTS
    width: int  # every layer of the stack is at most this wide (two-kernels: the kernels' WIDTH)
    first: int  # 0, or 1 where the first layer's input is wider than that (it then runs as a layer)
    layers: int  # layers in the stack
    in0: int
    hidden: int
    out: int
    offset: int  # where the stack's first weight sits in a network's parameters
    parameters: int  # the stack's parameters per network
    rows_per_chunk: int  # rows a block carries through the layers at a time (one-kernel: a tile)
    chunks: int  # per network (two-kernels: the forward kernel's grid.x)
    groups: int  # blocks per network that add gradients, each into a slot of its own summed after (1: in place)
    forward: str  # two-kernels: the kernels' names
    backward: str
    train: str  # one-kernel: the kernel's name
    block: tuple[int, int, int]
    shared: int = 0  # one-kernel: bytes of dynamic shared memory a block takes


def fused_train_shared_floats(tile: int, layers: int, in0: int, width: int, out: int) -> int:
    """The floats of network_train's shared memory (fused_network.cu's TrainLayout: the stack's weights
    and gradient sums, padded rows; x; a and act'(z) of each layer but the last; G; a scratch)."""
    def stride(n: int) -> int:
        return ceil_div(n, 4) * 4 + 4

    rows = [ceil_div(out, 4) * 4 if j == layers - 1 else width for j in range(layers)]
    cols = [stride(in0 if j == 0 else width) for j in range(layers)]
    weights = sum(r * c + r for r, c in zip(rows, cols))
    return 2 * weights + tile * stride(in0) + (2 * (layers - 1) + 1) * tile * stride(width) + 32


def plan_fused_network(layer_shapes: list[tuple[int, int]], encoding_size: int, batch: int,
                       precision: str = "fp32", variant: str = FUSED_VARIANTS[0], sm_count: int = 1,
                       shared_per_block: int = SHARED_PER_BLOCK) -> FusedPlan | None:
    """The plan for a network of these layers ((out, in) each, as NetworkSpec.layer_shapes, its hidden
    layers all of one width) on a batch of `batch` rows, or None where its hidden layers are wider than
    the kernels go. "one-kernel" gives way to "two-kernels" where its shared memory would not fit
    `shared_per_block`. Like the matmul plans, it depends on the device (its SMs, its shared memory) but
    never on the number of networks, so a network's sums run in one order whichever pack it is in."""
    if variant not in FUSED_VARIANTS:
        raise ValueError(f"fused variant {variant!r} is not one of: {', '.join(FUSED_VARIANTS)}")
    hidden, in_features = layer_shapes[0]
    out = layer_shapes[-1][0]
    if max(hidden, out) > CONSTANTS["FUSED_MAX_WIDTH"] or len(layer_shapes) < 2:
        return None
    if variant == "one-kernel":
        plan = _plan_one_kernel(layer_shapes, encoding_size, batch, precision, sm_count, shared_per_block)
        if plan is not None:
            return plan
    width = next(w for w in FUSED_WIDTHS if w >= max(hidden, out))
    first, stack, offset, parameters = _stack(layer_shapes, encoding_size, width)
    rows_per_chunk = min(CONSTANTS["FUSED_MAX_ROWS"], CONSTANTS["FUSED_ROW_ELEMENTS"] // width)
    chunks = ceil_div(batch, rows_per_chunk)
    activations = batch * sum(o for o, _ in stack)
    groups = max(1, min(chunks, FUSED_MAX_GROUPS, activations // (FUSED_PARTIAL_SHARE * parameters)))
    return FusedPlan("two-kernels", width, first, len(stack), stack[0][1], hidden, out, offset, parameters,
                     rows_per_chunk, chunks, groups, f"network_forward_{width}_{precision}",
                     f"network_backward_{width}_{precision}", "", (2 * width, 1, 1))


def _stack(layer_shapes, encoding_size: int, width: int):
    """(first, the stack's layer shapes, its offset, its parameters): the first layer runs on its own
    where its input is wider than `width`."""
    first = 0 if layer_shapes[0][1] <= width else 1
    stack = layer_shapes[first:]
    offset = encoding_size + sum(o * i + o for o, i in layer_shapes[:first])
    return first, stack, offset, sum(o * i + o for o, i in stack)


def _plan_one_kernel(layer_shapes, encoding_size: int, batch: int, precision: str, sm_count: int,
                     shared_per_block: int) -> FusedPlan | None:
    """network_train's plan: a tile of rows as large as the products allow (16 outputs a thread) and the
    shared memory fits, halved until it does; a network's tiles in groups of at least
    FUSED_TRAIN_GROUP_TILES, at most one group an SM (one network alone then fills the device, a pack
    of networks on small images keeps one or a few slots each)."""
    hidden, out = layer_shapes[0][0], layer_shapes[-1][0]
    width = ceil_div(max(hidden, out), 16) * 16  # the tensor cores' tiles; zeros past the layers
    first, stack, offset, parameters = _stack(layer_shapes, encoding_size, width)
    in0 = stack[0][1]
    # A multiple of 32 rows (or 16): every product that overwrites its operand then takes one pass of the
    # warps (mma_product's 32x16 outputs a warp, or 16x16), as fused_network.cu's in_place needs.
    tile = min(CONSTANTS["FUSED_TRAIN_MAX_ROWS"], CONSTANTS["FUSED_TRAIN_TILE_ELEMENTS"] // width) // 32 * 32

    def shared(rows: int) -> int:
        return 4 * fused_train_shared_floats(rows, len(stack), in0, width, out)

    while shared(tile) > shared_per_block and tile > CONSTANTS["FUSED_TRAIN_MIN_ROWS"]:
        tile = max(CONSTANTS["FUSED_TRAIN_MIN_ROWS"], tile // 2)
    if shared(tile) > shared_per_block:
        return None
    tiles = ceil_div(batch, tile)
    groups = max(1, min(ceil_div(tiles, CONSTANTS["FUSED_TRAIN_GROUP_TILES"]), sm_count))
    return FusedPlan("one-kernel", width, first, len(stack), in0, hidden, out, offset, parameters, tile, tiles, groups,
                     "", "", f"network_train_{precision}", (FUSED_TRAIN_THREADS, 1, 1), shared(tile))


# The hash grid's kernels (kernels/hashgrid.cu), by variant: "rows" (the engine's: a block's threads
# across the levels of its points, whole rows of the encoding read and written), "levels" (a level a
# block, as tiny-cuda-nn), "rows-scalar" (rows, one atomic a feature: what the vector atomics win) and
# "any" (the first kernels: 64-bit indices, a remainder, one atomic a feature). The first three exist
# for F in HASHGRID_FEATURES and 32-bit indices; beyond those, any variant runs "any".
HASHGRID_VARIANTS = ("rows", "levels", "rows-scalar", "any")
HASHGRID_FEATURES = (1, 2, 4)
HASHGRID_INDEX_LIMIT = 1 << 31  # floats a 32-bit kernel may index: of the encoding and of the tables


@dataclass(frozen=True)
class HashGridPlan:
    encode: str
    backward: str
    grid: tuple[int, int, int]  # per group of networks: grid.z is set by the launcher
    block: tuple[int, int, int]
    takes_features: bool  # the _any kernels take F as an argument; the others are compiled for it


def plan_hashgrid(rows: int, levels: int, features: int, table_floats: int, variant: str = "rows") -> HashGridPlan:
    """The kernels and launch of the hash grid's encode and backward over `rows` points of `levels`
    levels of `features` features, the tables `table_floats` floats a network."""
    if variant not in HASHGRID_VARIANTS:
        raise ValueError(f"hash grid variant '{variant}' is not one of: {', '.join(HASHGRID_VARIANTS)}")
    fits = (features in HASHGRID_FEATURES and rows * levels * features < HASHGRID_INDEX_LIMIT
            and table_floats < HASHGRID_INDEX_LIMIT)
    if variant == "any" or not fits:
        grid, block = elementwise_grid(rows)
        return HashGridPlan("hashgrid_encode_any", "hashgrid_backward_any", (grid[0], levels, 1), block, True)
    kernels = (f"hashgrid_encode_f{features}", f"hashgrid_backward_f{features}")
    if variant == "levels":
        grid, block = elementwise_grid(rows)
        return HashGridPlan(*(f"{k}_levels" for k in kernels), (grid[0], levels, 1), block, False)
    points = max(1, THREADS // levels)  # a block: `points` points, a thread for each of their levels
    scalar = "_scalar" if variant == "rows-scalar" and features > 1 else ""
    return HashGridPlan(f"{kernels[0]}_rows", f"{kernels[1]}_rows{scalar}",
                        (max(1, min(ceil_div(rows, points), MAX_GRID)), 1, 1), (levels, points, 1), False)


@dataclass(frozen=True)
class KernelDesign:
    """What a kernel's design counts on: the block its launcher gives it, and the fewest blocks an sm_90
    SM must be able to hold at once (registers and shared memory allowing) for it to run as designed.
    benchmarks/kernel_figures.py reports what ptxas's registers and shared memory allow;
    tests/test_kernels_compile.py fails where that falls below this, or where a kernel spills."""
    threads: int
    blocks_per_sm: int
    why: str
    # Bytes of dynamic shared memory a block takes at the shape the design is stated for (ptxas reports
    # only the static): counted with them.
    dynamic_shared: int = 0


# A streaming kernel's few independent loads a thread, over 3/4 of an SM's warps, keep about the bytes
# in flight that HBM's bandwidth times its latency asks of an SM (some 24 KB on an H200): more warps
# add little, fewer leave the memory idle.
def streaming(threads: int) -> KernelDesign:
    return KernelDesign(threads, 3 * 2048 // 4 // threads, "streams memory: 3/4 of an SM's warps keep HBM busy")


# By kernel name, or the prefix of a family's names (matmul_<tile>_<op>, network_forward_<width>_<precision>...).
KERNEL_DESIGNS = {
    **{name: streaming(THREADS) for name in ("fill", "bias_activation", "activation_backward", "fourier_features",
                                             "adam_update", "sgd_update", "sample_batch_u8", "sample_batch_f32",
                                             "hashgrid_zero")},
    **{f"hashgrid_{kind}_f{features}_": KernelDesign(THREADS, 6, "four scattered reads or atomics a point and level, "
                                                                  "independent: latency-bound, so at least 3/4 of an "
                                                                  "SM's warps in flight")
       for kind in ("encode", "backward") for features in HASHGRID_FEATURES},
    **{name: KernelDesign(THREADS, 4, "the fallback beyond the others' F and 32-bit sizes (and the baseline they "
                                      "are timed against): half an SM's warps")
       for name in ("hashgrid_encode_any", "hashgrid_backward_any")},
    "column_reduce": streaming(REDUCE_TX * REDUCE_TY),
    "mse_loss": streaming(LOSS_THREADS),
    "advance_schedule": KernelDesign(1, 1, "one thread a step"),
    **{prefix: KernelDesign(256, read_defines((kernels_dir() / "matmul.cu").read_text())["MATMUL_MIN_BLOCKS"],
                            "two tiles an SM hide each other's loads (__launch_bounds__(256, MATMUL_MIN_BLOCKS))")
       for prefix in ("matmul_", "linear_forward_", "linear_backward_input_")},
    **{f"network_{kind}_{width}_": KernelDesign(2 * width, max(1, 512 // (2 * width)),
                                                "a chunk's layers are serial: at least 16 warps an SM to hide a "
                                                "layer's barrier and loads")
       for kind in ("forward", "backward") for width in FUSED_WIDTHS},
    # At the pack of SIREN 3x64 (2 -> 64 -> 64 -> 64 -> 3, tiles of 64 rows): 197 KB.
    "network_train_": KernelDesign(FUSED_TRAIN_THREADS, 1, "its shared memory (the stack's weights and gradient "
                                                           "sums, a tile's every activation) is most of an SM's: "
                                                           "one block an SM, 8 warps whose 16 independent sums "
                                                           "each keep the FMA pipes busy between barriers",
                                   4 * fused_train_shared_floats(64, 4, 2, 64, 3)),
}


def design_key(kernel: str) -> str:
    """The entry of KERNEL_DESIGNS that a kernel follows: its own name, else the longest prefix that
    names its family."""
    if kernel in KERNEL_DESIGNS:
        return kernel
    prefixes = [p for p in KERNEL_DESIGNS if p.endswith("_") and kernel.startswith(p)]
    if not prefixes:
        raise KeyError(f"kernel {kernel!r} has no design in launch.KERNEL_DESIGNS")
    return max(prefixes, key=len)


def design_of(kernel: str) -> KernelDesign:
    return KERNEL_DESIGNS[design_key(kernel)]
