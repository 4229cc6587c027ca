"""Writing a large render: today's PNG writer against Pillow's default, side by side, and the memory
a CPU render of that size takes.

    PYTHONPATH=. python benchmarks/png_writer.py --size 8192

The picture is the coffee photo enlarged (smooth, like a network's render). Prints seconds for
Pillow's default (zlib level 6) and for inr's writer (images.save_uint8: inr_cli/formats/png.py at this size),
their ratio and the file
sizes; then renders a small SIREN (2x32) at the same size on the CPU and reports the peak of the
memory NumPy allocated for it (tracemalloc), against the uint8 image's own size.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from PIL import Image  # noqa: E402

import inr_cli  # noqa: E402,F401
from benchmarks.common import PHOTOS, ROOT, configure, environment, save_json  # noqa: E402
from inr_cli.backends.cpu_backend import CpuBackend  # noqa: E402
from inr_cli.core.network import NetworkSpec, init_parameters  # noqa: E402
from inr_cli.core.render import render_uint8  # noqa: E402
from inr_cli.formats.images import save_uint8  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-results" / "png-writer.json")
    args = parser.parse_args()
    picture = Image.open(PHOTOS["coffee"]).convert("RGB").resize((args.size, args.size), Image.BICUBIC)
    pixels = np.asarray(picture)
    start = time.perf_counter()
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    default_s, default_bytes = time.perf_counter() - start, buffer.tell()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        save_uint8(pixels, Path(tmp) / "render.png")
        ours_s = time.perf_counter() - start
        ours_bytes = (Path(tmp) / "render.png").stat().st_size
    print(f"PNG {args.size}x{args.size}: Pillow default {default_s:.2f} s ({default_bytes / 2**20:.0f} MiB), "
          f"inr {ours_s:.2f} s ({ours_bytes / 2**20:.0f} MiB): {default_s / ours_s:.2f}x faster")
    spec = NetworkSpec.from_config(configure("siren", hidden=32, layers=2), 3)
    params = init_parameters(spec, 0)
    tracemalloc.start()
    start = time.perf_counter()
    render_uint8(CpuBackend(), spec, params, args.size, args.size)
    render_s = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    image_bytes = args.size * args.size * 3
    print(f"CPU render {args.size}x{args.size} (SIREN 2x32): {render_s:.1f} s, peak {peak / 2**20:.0f} MiB "
          f"allocated, of which the uint8 image is {image_bytes / 2**20:.0f} MiB")
    save_json({"environment": environment(), "size": args.size, "pillow_default_s": default_s, "inr_s": ours_s,
               "speedup": default_s / ours_s, "pillow_default_bytes": default_bytes, "inr_bytes": ours_bytes,
               "cpu_render_s": render_s, "cpu_render_peak_bytes": peak, "image_bytes": image_bytes}, args.out)
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
