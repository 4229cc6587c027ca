"""The memory estimate (inr_cli/core/memory.py) against the measured peak, on the CPU: every preset at
three sizes, each run in a process of its own.

    nice -n 10 python -m benchmarks.memory_estimate --out benchmarks/results/memory-estimate-cpu.json

Each case runs `inr train` (a preset) or `inr fit-many` (the sets preset, a pack of 8 images) for a
few steps on a synthetic photo-like image and reads, at its end, the process's peak resident set
(VmHWM in /proc/self/status) and the peak of what tracemalloc traced (NumPy's arrays and Python's
objects). The estimate is what the command's memory check saw (a hook records it): the process's
resident set at the check plus the estimated allocations to come. The table compares the estimate's
total with the peak resident set, and its allocations with tracemalloc's peak past the check.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
CASES = [("siren", (64, 256, 512)), ("fourier", (64, 256, 512)), ("sigmoid", (64, 256, 512)),
         ("hashgrid", (256, 1024, 2048)), ("sets", (32, 64, 128))]
STEPS = 3
SET_IMAGES = 8
RECORD = "INR_MEMORY_RECORD"  # where the hook writes what the check saw


def at(point: str, **details) -> None:
    """The hook (INR_HOOKS=benchmarks.memory_estimate): the estimates the memory check saw, and
    tracemalloc's count at that moment (the allocations past it are the estimate's to match)."""
    if point != "memory-estimate" or not os.environ.get(RECORD):
        return
    estimate = details["estimate"]
    traced = tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else 0
    if tracemalloc.is_tracing() and not Path(os.environ[RECORD]).exists():  # the first check: the command's
        tracemalloc.reset_peak()
    with open(os.environ[RECORD], "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"where": estimate.where, "held": estimate.held, "needed": estimate.needed,
                                 "parts": {part.what: part.bytes for part in estimate.parts},
                                 "traced_at_check": traced, "doing": details["doing"]}) + "\n")


def photo(path: Path, size: int, seed: int = 0) -> Path:
    """A photo-like RGB image: smooth shapes and some texture (the pixels' values do not change the
    memory, only the size does)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    values = np.stack([np.sin(6 * xx + 3 * yy + k) for k in range(3)], -1) * 0.35 + 0.5
    values += rng.normal(0, 0.03, values.shape)
    Image.fromarray((np.clip(values, 0, 1) * 255).astype(np.uint8)).save(path)
    return path


def one(preset: str, size: int, out: Path) -> None:
    """Run one case in this process and write its figures to `out`."""
    from inr_cli.cli import app

    with tempfile.TemporaryDirectory(prefix="inr-memory-") as scratch:
        scratch = Path(scratch)
        record = scratch / "record.jsonl"
        os.environ[RECORD] = str(record)
        if preset == "sets":
            folder = scratch / "images"
            folder.mkdir()
            for i in range(SET_IMAGES):
                photo(folder / f"i{i}.png", size, seed=i)
            args = ["fit-many", str(folder), "-o", str(scratch / "set"), "--steps", str(STEPS), "--device", "cpu",
                    "-q", "--pack", str(SET_IMAGES)]
        else:
            image = photo(scratch / "photo.png", size)
            args = ["train", str(image), "--preset", preset, "--steps", str(STEPS), "--run-dir", str(scratch / "run"),
                    "--device", "cpu", "-q"]
        tracemalloc.start()
        try:
            app(args, standalone_mode=False)
        finally:
            traced_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        status = Path("/proc/self/status").read_text()
        peak = int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) * 1024
        checks = [json.loads(line) for line in record.read_text().splitlines()]
    host = [check for check in checks if check["where"] == "host memory"]
    first = host[0]
    out.write_text(json.dumps({"preset": preset, "size": size, "peak_rss": peak,
                               "traced_peak_after_check": traced_peak - first["traced_at_check"],
                               "held": first["held"], "needed": first["needed"], "estimate": first["held"] +
                               first["needed"], "parts": first["parts"], "checks": len(host)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/memory-estimate-cpu.json")
    parser.add_argument("--one", nargs=3, metavar=("PRESET", "SIZE", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--only", help="one preset")
    args = parser.parse_args()
    if args.one:
        one(args.one[0], int(args.one[1]), Path(args.one[2]))
        return
    rows = []
    env = {**os.environ, "INR_HOOKS": "benchmarks.memory_estimate", "PYTHONPATH": str(ROOT)}
    for preset, sizes in CASES:
        if args.only and preset != args.only:
            continue
        for size in sizes:
            with tempfile.NamedTemporaryFile(suffix=".json") as result:
                subprocess.run([sys.executable, "-m", "benchmarks.memory_estimate", "--one", preset, str(size),
                                result.name], check=True, env=env, cwd=ROOT)
                row = json.loads(Path(result.name).read_text())
            row["ratio"] = row["estimate"] / row["peak_rss"]
            row["allocations_ratio"] = row["needed"] / max(row["traced_peak_after_check"], 1)
            rows.append(row)
            print(f"{preset:9s} {size:5d} px  estimate {row['estimate'] / 1e6:8.1f} MB  peak "
                  f"{row['peak_rss'] / 1e6:8.1f} MB  ({row['ratio']:.2f})  allocations "
                  f"{row['needed'] / 1e6:8.1f} MB  traced past the check "
                  f"{row['traced_peak_after_check'] / 1e6:8.1f} MB ({row['allocations_ratio']:.2f})", flush=True)
    args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
