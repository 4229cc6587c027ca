"""Shared pieces of the benchmarks: test images, timing, result files."""

from __future__ import annotations

import json
import multiprocessing
import os
import platform
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from PIL import Image

from inr_cli.backends import get_backend
from inr_cli.config import Config, build_config, flags_to_values
from inr_cli.core.network import NetworkSpec, output_means
from inr_cli.core.pixels import PixelImage
from inr_cli.core.sizing import fit_to_image
from inr_cli.core.state import TrainingState
from inr_cli.core.trainer import Trainer

ROOT = Path(__file__).resolve().parent.parent
PHOTOS = {"coffee": ROOT / "tests" / "fixtures" / "coffee.png", "rocket": ROOT / "tests" / "fixtures" / "rocket.jpg"}


def photo(name: str, width: int, height: int, gray: bool = False) -> PixelImage:
    """A sample photo resized (Lanczos) to exactly width x height, as 8-bit values."""
    im = Image.open(PHOTOS[name]).convert("L" if gray else "RGB").resize((width, height), Image.LANCZOS)
    values = np.asarray(im, dtype=np.float32) / 255.0
    if values.ndim == 2:
        values = values[..., None]
    return PixelImage(values, ("l",) if gray else ("r", "g", "b"))


def configure(preset: str | None = None, image_size: int = 256, **flags) -> Config:
    """A configuration built as `inr train` builds one: the preset (or the model's), then flags, then
    the settings that follow the size decided for an image whose longer side is image_size."""
    return fit_to_image(build_config(None, flags_to_values(flags), preset), image_size, image_size, 3)[0]


def make_trainer(backend, config: Config, images: list[PixelImage], seeds=None) -> Trainer:
    """A trainer at step 0 for one network per image (seeds: the config's seed for each by default)."""
    seeds = list(seeds) if seeds is not None else [config.training.seed] * len(images)
    spec = NetworkSpec.from_config(config, images[0].n_channels)
    state = TrainingState.fresh(spec, seeds, output_means(config, images), config.network.weight_scale)
    return Trainer(backend, spec, config, images, state, seeds)


def warm_trainer(backend, config: Config, images: list[PixelImage]) -> Trainer:
    """make_trainer's, after a throwaway one ran three steps on a GPU: the kernels compiled and the
    graph captured before the clock starts."""
    if backend.name == "gpu":
        warm = make_trainer(backend, config, images)
        for _ in range(3):
            warm.step()
        warm.read_loss()
    return make_trainer(backend, config, images)


def timed(run_step, steps: int, synchronize) -> float:
    """Seconds per call of run_step over `steps` calls, synchronised at both ends."""
    synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        run_step()
    synchronize()
    return (time.perf_counter() - start) / steps


def environment() -> dict:
    info = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "python": platform.python_version()}
    try:
        # INR_COMMIT names the commit where the tree was copied without its git history.
        info["commit"] = os.environ.get("INR_COMMIT") or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
            text=True).stdout.strip() or "unknown"
    except OSError:
        info["commit"] = "unknown"
    try:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(0)
        info["device"] = props["name"].decode()
        info["cupy"] = cupy.__version__
    except Exception:
        info["device"] = f"CPU ({platform.processor() or platform.machine()})"
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        pass
    return info


def save_json(data: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def worker_pool(workers: int, jobs_per_worker: int | None = None) -> ProcessPoolExecutor:
    """Worker processes started fresh (spawn): a forked child cannot use a CUDA context its parent opened.
    jobs_per_worker: a new process after that many jobs (1: each job's peak memory is its own)."""
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               max_tasks_per_child=jobs_per_worker)


def default_workers(backend_name: str) -> int:
    """Jobs at once: one on a GPU (it is filled by one), one per core on the CPU."""
    return 1 if backend_name == "gpu" else os.cpu_count() or 1


def job_backend(device: str, workers: int):
    """A worker's backend: on the CPU its share of the cores (one thread per worker when there are as
    many workers as cores: separate processes scale perfectly, threads of one process nearly)."""
    backend = get_backend(device)
    if backend.name == "cpu":
        backend.threads = max(1, (os.cpu_count() or 1) // workers)
    return backend
