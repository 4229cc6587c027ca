"""A large photo end to end, as a user runs it: `inr train PHOTO` with no other flag, interrupted and
resumed, then scored, with the seconds to each PSNR target and the peak memory of every process.

    PYTHONPATH=. python benchmarks/large_photo.py PHOTO [--until-psnr 35] [--interrupt-at 40] [--device cpu]

The photo is not in the repository. The one in BENCHMARKS.md is Dragonfly_by_Bolly.jpg (4224x3168,
13.4 megapixels, CC-BY-SA 4.0) from Debian's lomiri-wallpapers-16.04 package:

    apt-get download lomiri-wallpapers-16.04 && dpkg-deb -x lomiri-wallpapers-16.04_*.deb wallpapers
    # wallpapers/usr/share/backgrounds/Dragonfly_by_Bolly.jpg

The run stops at --until-psnr (the training PSNR of the random batches, read every 10 steps); with
--interrupt-at it is stopped with Ctrl-C (SIGINT) at that step and continued with --resume. Then
`inr eval` scores the whole image, and a 4x render of the photo's centre is written beside a Lanczos
enlargement of the same crop (zoom-4x.png) to look at.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGETS = (30.0, 35.0, 40.0)
CROP = 384  # px of the photo's centre drawn 4x


def inr(*args: str) -> list[str]:
    return [sys.executable, "-m", "inr_cli", *args]


def run_measured(command: list[str], stop_at_step: int | None = None, metrics: Path | None = None) -> dict:
    """Run a command to its end (or, with stop_at_step, until metrics.csv reaches that step, then
    SIGINT it); its exit code, wall seconds and peak resident memory."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if stop_at_step is not None:
        while process.poll() is None:
            if metrics is not None and metrics.is_file() and last_step(metrics) >= stop_at_step:
                process.send_signal(signal.SIGINT)
                break
            time.sleep(1)
    _, status, usage = os.wait4(process.pid, 0)
    stderr = process.stderr.read()
    return {"command": " ".join(command[2:]), "exit": os.waitstatus_to_exitcode(status),
            "wall_seconds": round(time.perf_counter() - start, 1), "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "stderr_tail": stderr.strip().splitlines()[-3:]}


def rows(metrics: Path) -> list[dict]:
    with open(metrics, newline="") as f:
        return list(csv.DictReader(f))


def last_step(metrics: Path) -> int:
    found = rows(metrics)
    return int(found[-1]["step"]) if found else 0


def reached(metrics: Path) -> dict:
    """The step and training seconds at which the training PSNR first reached each target."""
    hits = {}
    for row in rows(metrics):
        for target in TARGETS:
            if f"{target:g}dB" not in hits and float(row["psnr"]) >= target:
                hits[f"{target:g}dB"] = {"step": int(row["step"]), "seconds": float(row["seconds"])}
    return hits


def zoom(run: Path, photo: Path, out: Path) -> None:
    """The network's 4x render of the photo's centre beside Lanczos's enlargement of the same pixels."""
    from PIL import Image

    import inr_cli
    from inr_cli.backends import get_backend
    from inr_cli.core.render import render_uint8

    net = inr_cli.load(run)
    with Image.open(photo) as im:
        image = im.convert("RGB")
    crop = min(CROP, image.width, image.height)
    left, top = image.width // 2 - crop // 2, image.height // 2 - crop // 2
    region = (4 * left, 4 * top, 4 * (left + crop), 4 * (top + crop))
    drawn = render_uint8(get_backend("cpu"), net.spec, net.params[None], 4 * image.width, 4 * image.height,
                         region=region)
    lanczos = image.crop((left, top, left + crop, top + crop)).resize((4 * crop, 4 * crop), Image.LANCZOS)
    pair = Image.new("RGB", (8 * crop + 8, 4 * crop), "white")
    pair.paste(Image.fromarray(drawn), (0, 0))
    pair.paste(lanczos, (4 * crop + 8, 0))
    pair.save(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("photo", type=Path)
    parser.add_argument("--until-psnr", type=float, default=35.0)
    parser.add_argument("--interrupt-at", type=int, default=0, help="SIGINT at this step, then --resume (0: never)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "large-photo")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    run = args.out / "run"
    if run.exists():
        raise SystemExit(f"{run} exists: pick another --out")
    load = os.getloadavg()
    train = inr("train", str(args.photo), "--run-dir", str(run), "--until-psnr", str(args.until_psnr), "--device",
                args.device, "-q")
    steps = [run_measured(train, args.interrupt_at or None, run / "metrics.csv")]
    if args.interrupt_at:
        steps.append(run_measured(inr("train", "--resume", str(run), "-q")))
    score = subprocess.run(inr("eval", str(run), str(args.photo), "--json", "--device", args.device),
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    zoom(run, args.photo, args.out / "zoom-4x.png")
    config = (run / "config.toml").read_text()
    report = {"photo": str(args.photo), "load_before": load, "load_after": os.getloadavg(), "processes": steps,
              "reached": reached(run / "metrics.csv"), "steps": last_step(run / "metrics.csv"),
              "eval": json.loads(score.stdout) if score.returncode == 0 else score.stderr.strip(),
              "peak_rss_mb": max(p["peak_rss_mb"] for p in steps), "config": config}
    (args.out / "large-photo.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k != "config"}, indent=1))


if __name__ == "__main__":
    main()
