"""The README's quick start as a new user runs it: `inr train --steps 300` on the built-in sample, in a
fresh folder, through the installed command. The PSNR it reaches is the figure the README quotes.

    PYTHONPATH=. python benchmarks/quick_start.py [--steps 300] [--device auto] [--preset NAME] [--out FILE]

`inr train` picks the hashgrid preset for the 192x128 sample; --preset siren --steps 1000 is the siren
preset's whole budget (BENCHMARKS.md quotes that one on a GPU).
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import ROOT, environment, save_json  # noqa: E402
from inr_cli.config import read_toml  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--preset", help="default: the one inr train picks")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    command = ["inr", "train", "--steps", str(args.steps), *(["--preset", args.preset] if args.preset else []),
               "--device", args.device, "-q"]
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "inr_cli", *command[1:]], cwd=tmp, capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall = time.perf_counter() - start
        if done.returncode != 0:
            sys.exit(f"{' '.join(command)} failed: {done.stderr.strip()}")
        with open(Path(tmp) / "runs" / "sample" / "metrics.csv", newline="") as f:
            last = list(csv.DictReader(f))[-1]
        saved = read_toml(Path(tmp) / "runs" / "sample" / "config.toml")
    network = f"{saved['network.model']} {saved['network.layers']}x{saved['network.hidden']}, {saved['encoding.name']}"
    result = {"environment": environment(), "command": " ".join(command[:-1]), "network": network,
              "steps": int(last["step"]),
              "psnr": float(last["psnr"]), "training_seconds": float(last["seconds"]),
              "wall_seconds": round(wall, 1)}
    print(result)
    out = args.out or ROOT / "benchmarks" / "results" / f"quick-start-{args.device}-{args.steps}.json"
    save_json(result, out)
    print(f"saved {out}")


if __name__ == "__main__":
    main()
