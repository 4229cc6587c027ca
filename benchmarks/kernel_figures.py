"""The kernels' static figures for sm_90 (H100, H200), on the CPU: every kernel of kernels/ compiled to
SASS as nvcc compiles it (one file at a time, the launchers' every instantiation), and for each its
registers, spills, shared memory, the occupancy those allow, and its instruction mix.

    PYTHONPATH=. python benchmarks/kernel_figures.py [--families] [--out FILE.json] [KERNEL_FILE.cu...]

ptxas (`nvcc -cubin -Xptxas -v`) gives the registers, spills and static shared memory (a kernel's
dynamic shared memory, at the shape its design is stated for, is added from launch.KERNEL_DESIGNS). The occupancy is
computed from them and the block size the launchers use (inr_cli/backends/launch.py, KERNEL_DESIGNS)
with sm_90's limits: 65536 registers (allocated per warp in units of 256), 228 KB of shared memory
(1 KB of it reserved per block), 2048 threads, 32 blocks and 64 warps per SM. The instruction mix
counts the SASS (nvdisasm, from the `nvidia-cuda-nvdisasm` wheel, or NVDISASM naming one): each
instruction once as written, not as executed, so a loop's body counts once; without a disassembler
the mix is left out. tests/test_kernels_compile.py fails on a spill or on an occupancy below the
design's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from inr_cli.backends.launch import KERNEL_DESIGNS, design_key, design_of  # noqa: E402
from inr_cli.resources import kernels_dir  # noqa: E402

ARCH = "sm_90"
# sm_90's limits per SM (CUDA C++ Programming Guide, "Compute capabilities", 9.0).
REGISTERS = 65536
REGISTER_UNIT = 256  # registers are allocated to a warp in units of this many
WARP_UNIT = 4  # and warps in groups of this many
SHARED = 228 * 1024
SHARED_RESERVED = 1024  # per block, for the system
SHARED_UNIT = 128
THREADS = 2048
BLOCKS = 32
WARPS = 64

# SASS opcodes (before the first dot) by what they are.
CLASSES = {
    "FFMA": "ffma", "FMUL": "fmul_fadd", "FADD": "fmul_fadd", "HMMA": "mma", "MUFU": "mufu",
    "LDG": "ldg", "STG": "stg", "LDS": "lds", "STS": "sts", "LDSM": "lds",
    "RED": "atomic", "REDG": "atomic", "ATOM": "atomic", "ATOMG": "atomic", "ATOMS": "shared_atomic",
    "LDL": "local", "STL": "local", "LDGSTS": "ldg",
    "BAR": "barrier", "SHFL": "shfl",
    "IMAD": "int", "IADD3": "int", "LOP3": "int", "ISETP": "int", "SHF": "int", "LEA": "int", "IABS": "int",
    "I2F": "convert", "F2I": "convert", "F2F": "convert",
}


@dataclass
class KernelFigures:
    kernel: str
    file: str
    registers: int
    spill_stores: int
    spill_loads: int
    stack: int
    shared: int
    threads: int = 0
    blocks_per_sm: int = 0
    occupancy: float = 0.0  # resident warps / 64
    limited_by: str = ""
    design_blocks: int = 0
    mix: dict = field(default_factory=dict)


def compile_cubin(path: Path, out_dir: Path, arch: str = ARCH) -> subprocess.CompletedProcess:
    """nvcc -cubin with ptxas's resource report (on stderr); the cubin is out_dir/<stem>.cubin."""
    return subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-std=c++17", "-Werror", "all-warnings", "-Xptxas",
                           "-v", "-o", str(out_dir / f"{path.stem}.cubin"), str(path)],
                          capture_output=True, text=True, timeout=900)


def parse_ptxas(report: str, file: str = "") -> dict[str, KernelFigures]:
    """{kernel: figures} from ptxas -v's report."""
    figures = {}
    for block in re.split(r"ptxas info\s+: Compiling entry function ", report)[1:]:
        name = re.match(r"'(\w+)'", block).group(1)
        frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", block)
        used = re.search(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?", block)
        figures[name] = KernelFigures(name, file, int(used.group(1)), int(frame.group(2)), int(frame.group(3)),
                                      int(frame.group(1)), int(used.group(2) or 0))
    return figures


def occupancy(registers: int, shared: int, threads: int) -> tuple[int, str]:
    """(blocks resident per SM, what limits them) for a kernel on sm_90."""
    warps = -(-threads // 32)
    per_warp = -(-max(registers, 1) * 32 // REGISTER_UNIT) * REGISTER_UNIT
    warps_by_registers = REGISTERS // per_warp // WARP_UNIT * WARP_UNIT
    # Where two limits tie, the hard ones (threads, blocks) are named.
    limits = {"threads": min(THREADS // threads, WARPS // warps), "blocks": BLOCKS,
              "registers": warps_by_registers // warps}
    if shared:
        limits["shared memory"] = SHARED // (-(-(shared + SHARED_RESERVED) // SHARED_UNIT) * SHARED_UNIT)
    limited_by = min(limits, key=limits.get)
    return limits[limited_by], limited_by


def disassembler() -> str | None:
    """nvdisasm: NVDISASM, on PATH, or from the nvidia-cuda-nvdisasm wheel in this environment."""
    if os.environ.get("NVDISASM"):
        return os.environ["NVDISASM"]
    if shutil.which("nvdisasm"):
        return shutil.which("nvdisasm")
    try:
        import nvidia
    except ImportError:
        return None
    for root in nvidia.__path__:
        for candidate in sorted(Path(root).glob("*/bin/nvdisasm")):
            return str(candidate)
    return None


def instruction_mix(cubin: Path, tool: str) -> dict[str, Counter]:
    """{kernel: Counter of instruction classes (CLASSES, "other", "total")} from the SASS."""
    sass = subprocess.run([tool, "-c", str(cubin)], capture_output=True, text=True, check=True, timeout=600).stdout
    mixes: dict[str, Counter] = {}
    current = None
    for line in sass.splitlines():
        section = re.match(r"\s*\.section\s+\.text\.(\w+),", line)
        if section:
            current = mixes.setdefault(section.group(1), Counter())
            continue
        instruction = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", line)
        if current is None or not instruction or instruction.group(1) in ("NOP", "BRA", "EXIT"):
            continue
        opcode = instruction.group(1)
        current[CLASSES.get(opcode, "other")] += 1
        current["total"] += 1
    return mixes


def kernel_figures(build_dir: Path, sources=None, with_mix: bool = True) -> list[KernelFigures]:
    """Every kernel of the kernel files, compiled into build_dir, with its occupancy and mix."""
    tool = disassembler() if with_mix else None
    rows = []
    for path in sources or sorted(kernels_dir().glob("*.cu")):
        result = compile_cubin(path, build_dir)
        if result.returncode != 0:
            raise RuntimeError(f"{path.name} did not compile: {result.stderr.strip()[:2000]}")
        figures = parse_ptxas(result.stderr, path.name)
        mixes = instruction_mix(build_dir / f"{path.stem}.cubin", tool) if tool else {}
        for name, f in sorted(figures.items()):
            design = design_of(name)
            f.threads, f.design_blocks = design.threads, design.blocks_per_sm
            f.shared += design.dynamic_shared  # at the design's shape (launch.KERNEL_DESIGNS)
            f.blocks_per_sm, f.limited_by = occupancy(f.registers, f.shared, f.threads)
            f.occupancy = f.blocks_per_sm * -(-f.threads // 32) / WARPS
            f.mix = dict(mixes.get(name, {}))
            rows.append(f)
    return rows


MIX_COLUMNS = ("ffma", "fmul_fadd", "mma", "mufu", "ldg", "stg", "lds", "sts", "atomic", "int", "total")


def markdown(rows: list[KernelFigures]) -> str:
    mix = any(r.mix for r in rows)
    head = "| kernel | regs | spills | smem (B) | threads | blocks/SM (design) | occupancy | limited by |"
    lines = [head + (" " + " | ".join(MIX_COLUMNS) + " |" if mix else ""),
             "| --- | ---: | ---: | ---: | ---: | --- | ---: | --- |" + ("---: |" * len(MIX_COLUMNS) if mix else "")]
    for r in rows:
        line = (f"| {r.kernel} | {r.registers} | {r.spill_stores + r.spill_loads} | {r.shared} | {r.threads} | "
                f"{r.blocks_per_sm} ({r.design_blocks}) | {r.occupancy:.0%} | {r.limited_by} |")
        if mix:
            line += " " + " | ".join(str(r.mix.get(c, 0)) for c in MIX_COLUMNS) + " |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def family_markdown(rows: list[KernelFigures]) -> str:
    """One row per entry of launch.KERNEL_DESIGNS (a kernel, or a family of instantiations): how many
    kernels, their registers (fewest-most), spills, shared memory, and the fewest blocks an SM holds
    against the design's, with what limits them."""
    families: dict[str, list[KernelFigures]] = {}
    for r in rows:
        families.setdefault(design_key(r.kernel), []).append(r)
    lines = ["| kernels | count | regs | spills (B) | smem (B) | threads | blocks/SM (design) | occupancy | "
             "limited by |", "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |"]
    for key, members in families.items():
        regs = sorted({r.registers for r in members})
        worst = min(members, key=lambda r: r.blocks_per_sm)
        name = f"{key}*" if key.endswith("_") else key
        lines.append(f"| {name} | {len(members)} | {regs[0]}{f'-{regs[-1]}' if len(regs) > 1 else ''} | "
                     f"{sum(r.spill_stores + r.spill_loads for r in members)} | {max(r.shared for r in members)} | "
                     f"{worst.threads} | {worst.blocks_per_sm} ({worst.design_blocks}) | {worst.occupancy:.0%} | "
                     f"{worst.limited_by} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--no-mix", action="store_true", help="leave the instruction mix out")
    parser.add_argument("--families", action="store_true", help="one row per design family, then every kernel")
    parser.add_argument("files", nargs="*", help="kernel files of kernels/ (default: all)")
    args = parser.parse_args()
    if shutil.which("nvcc") is None:
        print("nvcc not found: the static figures need the CUDA compiler", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="inr-kernel-figures-") as build:
        sources = [kernels_dir() / name for name in args.files] or None
        rows = kernel_figures(Path(build), sources, with_mix=not args.no_mix)
    if not args.no_mix and not any(r.mix for r in rows):
        print("no nvdisasm (pip install nvidia-cuda-nvdisasm, or NVDISASM=path): the mix is left out",
              file=sys.stderr)
    if args.families:
        print(family_markdown(rows))
    print(markdown(rows))
    if args.out:
        args.out.write_text(json.dumps({"arch": ARCH, "kernels": [asdict(r) for r in rows],
                                        "designs": {k: asdict(v) for k, v in KERNEL_DESIGNS.items()}}, indent=1)
                            + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
