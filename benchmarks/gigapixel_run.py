"""A gigapixel-class image end to end, as a user runs it: train, interrupted and resumed, a region
rendered, inr view's tiles; each command's wall time and peak memory (its own process's high-water
resident set), and the whole image's PSNR read from the run's subset of pixels against every pixel.

    python benchmarks/gigapixel_mosaic.py DEBS/usr/share/backgrounds --pixels 250e6 -o bench-results/mosaic-250.tif
    nice -n 10 python benchmarks/gigapixel_run.py bench-results/mosaic-250.tif --steps 60 --interrupt-at 30 \\
        --device cpu --out benchmarks/results/gigapixel-250-cpu.json

Steps: `inr train IMAGE --steps N` stopped by SIGINT once metrics.csv passes --interrupt-at (the
checkpoint written on the signal), then `inr train --resume RUN` to N (--stop-after: both stopped
for good once that many seconds have passed); `inr render RUN --region` (2048 x 2048 at the image's
centre); `inr view RUN`: the page's state, the tiles of a view at the training size and deeper, the
coarsest tiles and the training image's overview; then (--full-psnr) the final network drawn on
every pixel, scored against the image beside the subset's reading and subsets of other sizes; last
(--extend N), the finished run resumed for N more steps. Every figure goes into the --out JSON as
it is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def inr(*args) -> list[str]:
    return [sys.executable, "-m", "inr_cli", *map(str, args)]


def measured(command: list[str], stop_when=None) -> dict:
    """Run a command: its wall seconds, exit code, peak resident set (os.wait4's ru_maxrss: its own
    high-water mark) and its last lines. stop_when() -> True sends it SIGINT, once. Linux carries this
    process's own high-water mark into a child's ru_maxrss across the exec: a child's figure is its
    own only above `driver_peak_gb`, which is why this process never reads a checkpoint's arrays."""
    driver_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stdout), daemon=True)
    reader.start()
    ended: dict = {}
    waiter = threading.Thread(target=lambda: ended.update(zip(("pid", "status", "usage"), os.wait4(process.pid, 0))))
    waiter.start()
    interrupted = False
    while waiter.is_alive():
        if stop_when is not None and not interrupted and stop_when():
            process.send_signal(signal.SIGINT)
            interrupted = True
        waiter.join(0.5)
    process.returncode = os.waitstatus_to_exitcode(ended["status"])
    reader.join(10)
    return {"command": " ".join(map(str, command[2:])), "seconds": round(time.perf_counter() - start, 1),
            "exit": process.returncode, "peak_rss_gb": round(ended["usage"].ru_maxrss / 2**20, 3),
            "driver_peak_gb": round(driver_peak / 2**20, 3),
            "tail": [line.rstrip() for line in lines[-8:]]}


def last_step(run: Path) -> int:
    try:
        rows = (run / "metrics.csv").read_text().splitlines()[1:]
        return int(rows[-1].split(",")[0]) if rows else 0
    except (OSError, ValueError, IndexError):
        return 0


def view_checks(run: Path, device: str) -> dict:
    """inr view on the run: seconds to its state, to the tiles of a view, and the server's peak memory."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(inr("view", run, "--port", port, "--no-browser", "--device", device),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    result = {}
    try:
        start = time.perf_counter()
        while True:
            try:
                state = json.loads(urllib.request.urlopen(base + "/api/state", timeout=600).read())
                break
            except OSError:
                if server.poll() is not None or time.perf_counter() - start > 900:
                    return {"error": "inr view did not start"}
                time.sleep(0.5)
        result["seconds_to_state"] = round(time.perf_counter() - start, 2)
        pyramid = state["pyramid"]
        base_level, top = pyramid["base"], pyramid["maxLevel"]

        def centre(level: int) -> list[str]:
            """The (up to) 4 tiles at the centre of a level at or above the training size."""
            columns = -(-(state["width"] << (level - base_level)) // pyramid["tileSize"])
            rows = -(-(state["height"] << (level - base_level)) // pyramid["tileSize"])
            xs = sorted({max(0, columns // 2 - 1), columns // 2 if columns > 1 else 0})
            ys = sorted({max(0, rows // 2 - 1), rows // 2 if rows > 1 else 0})
            return [f"{level}/{x}/{y}.png" for x in xs for y in ys]

        fetches = {"network tiles at the training size (4 at the centre)":
                   [f"/tile/0/{path}" for path in centre(base_level)],
                   "network tiles 8x deeper (4)": [f"/tile/0/{path}" for path in centre(base_level + 3)],
                   "network tiles, the coarsest level": ["/tile/0/0/0/0.png"],
                   "the training image's overview": ["/source/0.png"],
                   "the training image's coarsest tile": ["/source/0/0/0/0.png"],
                   "the training image's tiles at its size (4)": [f"/source/0/{path}" for path in centre(base_level)]}
        for what, paths in fetches.items():
            start = time.perf_counter()
            sizes = [len(urllib.request.urlopen(base + path, timeout=600).read()) for path in paths]
            result[what] = {"seconds": round(time.perf_counter() - start, 2), "bytes": sum(sizes)}
        result["levels"] = {"base": base_level, "max": top}
        for line in Path(f"/proc/{server.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                result["peak_rss_gb"] = round(int(line.split()[1]) / 2**20, 3)
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(30)
    return result


def psnr_checks(run: Path, image_path: Path, device: str) -> dict:
    """The final network's PSNR on every pixel (drawn a band of rows at a time) and on subsets."""
    from inr_cli.backends import make_backend
    from inr_cli.core.metrics import psnr_from_mse
    from inr_cli.core.render import render_rows
    from inr_cli.core.subset_psnr import PixelSubset
    from inr_cli.formats import checkpoint as ckpt
    from inr_cli.formats.data import load_training_data

    saved = ckpt.load(run, moments=False)
    image = load_training_data(str(image_path))
    backend = make_backend(device, quiet=True)
    result = {"subsets": {}}
    for count in (1 << 16, 1 << 18, 1 << 20, 1 << 22):
        start = time.perf_counter()
        subset = PixelSubset.of(image, count=count)
        result["subsets"][str(count)] = {"psnr": round(subset.psnr(backend, saved.spec, saved.params), 4),
                                         "seconds": round(time.perf_counter() - start, 2)}
    start = time.perf_counter()
    total, table = 0.0, image.table()
    for row_start, row_stop, values in render_rows(backend, saved.spec, saved.params, image.width, image.height,
                                                   chunk_pixels=1 << 20):
        drawn = np.clip(values.reshape(-1, image.n_channels), 0.0, 1.0).astype(np.float64)
        truth = table[row_start * image.width:row_stop * image.width].astype(np.float64) / 255.0
        total += float(np.sum((drawn - truth) ** 2))
    result["whole"] = {"psnr": round(psnr_from_mse(total / (image.width * image.height * image.n_channels)), 4),
                       "seconds": round(time.perf_counter() - start, 1)}
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("image", type=Path)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--interrupt-at", type=int, default=30, help="SIGINT once metrics.csv passes this step, "
                        "then --resume (0: no interruption)")
    parser.add_argument("--stop-after", type=float, default=0, help="seconds of training commands after which the "
                        "run is stopped for good with SIGINT (0: none), e.g. a wall-time budget")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--run-dir", type=Path, default=Path("bench-results/gigapixel-run"))
    parser.add_argument("--train-flags", default="", help="more flags for inr train, one string")
    parser.add_argument("--full-psnr", action="store_true", help="also draw every pixel to score the subset")
    parser.add_argument("--extend", type=int, default=0, help="last, resume the finished run for this many more "
                        "steps: a checkpoint of its tables read back and trained on")
    parser.add_argument("--skip-view", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import shlex
    import shutil

    shutil.rmtree(args.run_dir, ignore_errors=True)
    report = {"image": str(args.image), "device": args.device, "steps": args.steps}

    def save():
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")

    from PIL import Image

    Image.MAX_IMAGE_PIXELS = None
    with Image.open(args.image) as im:
        report["size"] = f"{im.width}x{im.height}"
        report["image_8bit_gb"] = round(im.width * im.height * len(im.getbands()) / 2**30, 3)
    train = inr("train", args.image, "--steps", args.steps, "--device", args.device, "--run-dir", args.run_dir,
                *shlex.split(args.train_flags))
    started = time.perf_counter()

    def out_of_time() -> bool:
        return bool(args.stop_after) and time.perf_counter() - started > args.stop_after

    report["train"] = measured(train, stop_when=lambda: out_of_time() or (
        args.interrupt_at and last_step(args.run_dir) >= args.interrupt_at))
    save()
    if report["train"]["exit"] == 130 and not out_of_time():
        report["resume"] = measured(inr("train", "--resume", args.run_dir), stop_when=out_of_time)
        save()
    from inr_cli.formats import checkpoint as ckpt

    saved = ckpt.load(args.run_dir, moments=False, deferred=True)  # no array read here (see measured)
    report["parameters"] = saved.spec.parameter_count()
    report["model_gb"] = round(report["parameters"] * 4 / 2**30, 3)  # float32, as it trains
    report["training_seconds"] = round(saved.state.seconds, 1)
    height, width = saved.data_shape[:2]
    left, top = max(0, width // 2 - 1024), max(0, height // 2 - 1024)
    region = f"{left},{top},{min(width, left + 2048)},{min(height, top + 2048)}"
    report["render_region"] = measured(inr("render", args.run_dir, "--region", region, "--device", args.device,
                                              "-o", args.run_dir / "region.png", "--force"))
    save()
    if not args.skip_view:
        report["view"] = view_checks(args.run_dir, args.device)
        save()
    if args.full_psnr:
        report["psnr"] = psnr_checks(args.run_dir, args.image, args.device)
        save()
    if args.extend:
        step = ckpt.load(args.run_dir, moments=False, deferred=True).step
        report["extend"] = measured(inr("train", "--resume", args.run_dir, "--steps", step + args.extend,
                                        "--until-psnr", 0))
        save()
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
