"""Where the wall time of `inr train PHOTO` goes: training, reading the image, pictures (previews, the
final render, comparison and animation), checkpoints, and the rest (setting up), for this tree and,
side by side, an older one.

    PYTHONPATH=. python benchmarks/wall_time.py PHOTO --steps 20 --device cpu [--before DIR] --out FILE.json
    PYTHONPATH=. python benchmarks/wall_time.py PHOTO --until-psnr 44 --steps 2000 --device gpu --out FILE.json

Flags it does not know go to `inr train` as they are. Each run is a fresh process, as a user runs
it (`inr train PHOTO --run-dir TMP --json` and the flags given), timed from its start to its exit;
this tree's split is the one the run reports itself.
--before DIR runs the same command in another checkout (`git worktree add DIR COMMIT`), one that
may not report a split: there the split is measured by wrappers around the functions that read
the image, draw and write the pictures and write the checkpoints (everything ran on the loop's
thread then), and training is the training seconds it reports.

The photo is not in the repository. BENCHMARKS.md's is a 4000x2250 (9-megapixel) crop of
seeding_by_Clements_Engelhardt.jpg from Debian's lomiri-wallpapers-16.04 package:

    apt-get download lomiri-wallpapers-16.04 && dpkg-deb -x lomiri-wallpapers-16.04_*.deb wallpapers
    cd wallpapers/usr/share/backgrounds && python -c "from PIL import Image; \\
    Image.open('seeding_by_Clements_Engelhardt.jpg').crop((656, 369, 4656, 2619)).save('photo-9mpx.jpg', quality=95)"
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("training", "reading", "pictures", "checkpoints", "rest")

# For a tree that does not report its split: (module, function, part) whose calls are timed. On the
# CPU a step is done when its call returns, so the steps' calls are its training time (the seconds an
# older run reported left out the steps between a reading and a preview).
OLD_WRAPPED = (
    ("inr_cli.core.trainer", "Trainer.step", "training"),
    ("inr_cli.runs.start", "load_training_data", "reading"),
    ("inr_cli.runs.training", "fingerprint", "reading"),
    ("inr_cli.runs.training", "_write_preview", "pictures"),
    ("inr_cli.runs.training", "comparison", "pictures"),
    ("inr_cli.runs.training", "_save_quietly", "pictures"),
    ("inr_cli.runs.training", "_write_run_pictures", "pictures"),
    ("inr_cli.formats.checkpoint", "save", "checkpoints"),
)


def measure_old(argv: list[str]) -> None:
    """In the older tree's process: run `inr` with argv, its named functions timed; the split on
    stderr as one JSON line."""
    import importlib

    spent = dict.fromkeys(PARTS[:4], 0.0)
    inside = {"depth": 0}

    def wrap(module: str, name: str, part: str) -> None:
        owner = importlib.import_module(module)
        *path, name = name.split(".")
        for attribute in path:
            owner = getattr(owner, attribute)
        function = getattr(owner, name, None)
        if function is None:
            return

        @functools.wraps(function)
        def timed(*args, **kwargs):
            if inside["depth"]:  # a wrapped function called by another: counted once
                return function(*args, **kwargs)
            inside["depth"] += 1
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[part] += time.perf_counter() - start
                inside["depth"] -= 1

        setattr(owner, name, timed)

    for module, name, part in OLD_WRAPPED:
        wrap(module, name, part)
    from inr_cli.cli import app

    try:
        app(argv, standalone_mode=False)
    finally:
        print("WRAPPED " + json.dumps(spent), file=sys.stderr)


def run_tree(tree: Path, photo: Path, flags: list[str], old: bool, device: str) -> dict:
    """One `inr train` in a fresh process of `tree`: its exit, wall seconds and split."""
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["train", str(photo), "--run-dir", str(Path(tmp) / "run"), "--json", "-q", *flags]
        command = [sys.executable, str(Path(__file__).resolve()), "--measure-old", *argv] if old else \
            [sys.executable, "-m", "inr_cli", *argv]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        load = os.getloadavg()[0]
        start = time.perf_counter()
        done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True)
        wall = time.perf_counter() - start
    if done.returncode != 0:
        return {"tree": str(tree), "exit": done.returncode, "error": done.stderr.strip().splitlines()[-3:]}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if "wall" in result:  # the run's own split, from its command's start
        split = {part: result["wall"][part] for part in PARTS}
        in_process = result["wall"]["total"]
    else:
        split = json.loads(next(line for line in done.stderr.splitlines() if line.startswith("WRAPPED "))[8:])
        if device != "cpu":  # a step's call returns before the device is done: the run's own seconds
            split["training"] = result["seconds"]
        in_process = None
    # The rest: everything else from the process's start (imports, setting up) to its exit.
    split["rest"] = wall - sum(split[part] for part in PARTS[:4])
    return {"tree": str(tree), "exit": 0, "steps": result["step"], "psnr": result["psnr"], "wall": round(wall, 2),
            "in_process": in_process, "load_before": round(load, 1),
            "split": {part: round(seconds, 2) for part, seconds in split.items()}}


def table(rows: list[tuple[str, dict]]) -> str:
    lines = ["| run | steps | PSNR | wall (s) | " + " | ".join(PARTS) + " | outside training |",
             "| --- | --- | --- | --- | " + " | ".join("---" for _ in PARTS) + " | --- |"]
    for name, row in rows:
        if row.get("exit"):
            lines.append(f"| {name} | failed: {row.get('error')} |")
            continue
        split = row["split"]
        lines.append(f"| {name} | {row['steps']} | {row['psnr']:.2f} | {row['wall']:.1f} | "
                     + " | ".join(f"{split[part]:.1f}" for part in PARTS)
                     + f" | {row['wall'] - split['training']:.1f} |")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--measure-old":
        measure_old(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("photo", type=Path)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--until-psnr", type=float, default=0.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--before", type=Path, help="an older checkout to run beside this one")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each tree, alternating")
    parser.add_argument("--out", type=Path, required=True)
    args, passed = parser.parse_known_args()  # any other flag goes to inr train as it is
    flags = ["--steps", str(args.steps), "--device", args.device, *passed]
    if args.until_psnr:
        flags += ["--until-psnr", f"{args.until_psnr:g}"]
    photo = args.photo.resolve()
    runs = []
    for _ in range(args.repeats):
        if args.before is not None:
            runs.append(("before", run_tree(args.before.resolve(), photo, flags, old=True, device=args.device)))
        runs.append(("this tree", run_tree(ROOT, photo, flags, old=False, device=args.device)))
        print(table(runs[-2:] if args.before is not None else runs[-1:]), flush=True)
    report = {"photo": str(photo), "flags": flags, "cpus": os.cpu_count(), "runs": [{"name": n, **r} for n, r in runs]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(table(runs))


if __name__ == "__main__":
    main()
