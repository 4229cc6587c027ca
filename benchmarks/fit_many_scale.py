"""What the `inr fit-many --ray` driver costs per image, and what the whole pipeline delivers, at
two set sizes (to show what grows with the set).

For each folder, a local Ray cluster is started (ray.cluster_utils, random ports), then the
command runs in its own process with a one-step fit, so that fitting costs almost nothing and
what is left is the pipeline: listing, probing, planning, the workers' decoding, fitting and
writing, and the assembly of weights.npy. The driver process reports its own CPU time (user +
system, all its threads, from its start to the end of its exit), the part of it spent in each phase
(exit: after the report written at exit, Ray's shutdown already done), and its peak RSS at exit;
images/s is the command's wall time.

    PYTHONPATH=. python benchmarks/fit_many_scale.py /tmp/n10k /tmp/n100k --repeat 5 \
        --out benchmarks/results/fit-many-scale.json

Make the folders once, e.g. JPEGs of 128x96 (this file's --make N FOLDER writes N of them).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
# The phases paid once per command whatever the size of the set (the interpreter, the imports,
# reading the command line, joining the cluster, the exit); the rest grows with the set (Ray's
# shutdown, in "other", excepted).
ONCE_PHASES = ["start-up", "imports", "arguments", "connect", "exit"]
FIT = ["--size", "32", "--model", "siren", "--layers", "3", "--hidden", "64", "--steps", "1", "--device", "cpu", "-q"]


def driver(report: str, args: list[str]) -> None:
    """Run as the command's own process: `inr fit-many ARGS`, then its rusage into `report`."""
    import resource

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    phases: dict[str, float] = {}

    def timed(module, name: str) -> None:
        """The driver's CPU (all its threads, Ray's too) while `name` runs, into phases."""
        function = getattr(module, name)

        def wrapper(*args, **kwargs):
            start = cpu()
            try:
                return function(*args, **kwargs)
            finally:
                phases[name] = round(phases.get(name, 0) + cpu() - start, 3)

        setattr(module, name, wrapper)

    def reading_arguments_ends(module, name: str) -> None:
        """The CPU from the end of the imports to the call of `name`: Typer reading the command line."""
        function = getattr(module, name)

        def wrapper(*args, **kwargs):
            phases["arguments"] = round(cpu() - phases["start-up"] - phases["imports"], 3)
            return function(*args, **kwargs)

        setattr(module, name, wrapper)

    def write() -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        Path(report).write_text(json.dumps({"cpu_s": cpu(), "peak_rss_mb": usage.ru_maxrss / 1024,
                                            "phases": phases}))

    atexit.register(write)
    phases["start-up"] = round(cpu(), 3)  # Python and the benchmark's own imports
    from inr_cli.cli import run
    from inr_cli.sets import cluster, driver, inputs

    # Each function wrapped where it is called from (driver imports its names, so it holds its own)
    for module, name in [(cluster, "connect"), (inputs, "list_inputs"), (cluster, "probe_on_ray"),
                         (driver, "entries_from_probe"), (cluster, "run_on_ray"), (driver, "assemble"),
                         (cluster, "assemble")]:
        timed(module, name)
    reading_arguments_ends(driver, "fit_set")
    phases["imports"] = round(cpu() - phases["start-up"], 3)  # the command's modules (Ray's come in connect)

    sys.argv = ["inr", "fit-many", *args]
    run()  # the console script: its exit is measured too


def measure(folder: Path, out: Path, cpus: int) -> dict:
    import subprocess
    import tempfile
    import time

    from ray.cluster_utils import Cluster

    # Ray starts its workers at nice 15; on a machine shared with other work they would measure the
    # neighbours, not the pipeline, so they run at the driver's priority.
    os.environ["RAY_worker_niceness"] = "0"
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus})
    try:
        with tempfile.NamedTemporaryFile(suffix=".json") as report:
            command = [sys.executable, __file__, "--driver", report.name, str(folder), "-o", str(out),
                       "--ray", cluster.address, *FIT]
            start = time.perf_counter()
            env = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}
            process = subprocess.Popen(command, env={**env, "PYTHONPATH": str(ROOT)})
            # The whole process's CPU, its exit included (the interpreter's teardown comes after the
            # report written at exit, and was not counted before)
            _, status, whole = os.wait4(process.pid, 0)
            wall = time.perf_counter() - start
            if status:
                raise subprocess.CalledProcessError(os.waitstatus_to_exitcode(status), command)
            usage = json.loads(Path(report.name).read_text())
            cpu = whole.ru_utime + whole.ru_stime
            usage["phases"]["exit"] = round(cpu - usage["cpu_s"], 3)
            # The plan file, the rows file made ready, Ray's shutdown, the progress line
            usage["phases"]["other"] = round(cpu - sum(usage["phases"].values()), 3)
            usage["cpu_s"] = cpu
    finally:
        cluster.shutdown()
    count = sum(1 for _ in open(out / "index.csv")) - 1
    weights = (out / "weights.npy").stat().st_size
    once = sum(usage["phases"][name] for name in ONCE_PHASES)
    return {"images": count, "wall_s": round(wall, 2), "images_per_s": round(count / wall, 1),
            "driver_cpu_s": round(usage["cpu_s"], 2),
            "driver_cpu_ms_per_image": round(1000 * usage["cpu_s"] / count, 4),
            "driver_cpu_once_s": round(once, 3),
            "driver_cpu_growing_ms_per_image": round(1000 * (usage["cpu_s"] - once) / count, 4),
            "driver_peak_rss_mb": round(usage["peak_rss_mb"], 1), "driver_cpu_s_by_phase": usage["phases"],
            "weights_mb": round(weights / 2**20, 1),
            "input_mb": round(sum(p.stat().st_size for p in folder.iterdir()) / 2**20, 1)}


def make(count: int, folder: Path) -> None:
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:96, 0:128]
    for i in range(count):
        a, b, c = rng.uniform(2, 20, 3)
        values = np.stack([np.sin(xx / a), np.cos(yy / b), np.sin((xx + yy) / c)], -1) * 0.4 + 0.5
        Image.fromarray((values * 255).astype(np.uint8)).save(folder / f"img{i:06d}.jpg", quality=85)


def main() -> None:
    if sys.argv[1:2] == ["--driver"]:  # before the imports below: the driver loads what `inr` loads
        return driver(sys.argv[2], sys.argv[3:])
    import argparse
    import compileall
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="CPUs of the local Ray cluster")
    parser.add_argument("--make", type=int, default=0, metavar="N", help="write N JPEGs of 128x96 into the folder")
    parser.add_argument("--repeat", type=lambda text: max(1, int(text)), default=1, metavar="N",
                        help="run each folder N times; its result is the run of median driver CPU, all runs beside it")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.make:
        return make(args.make, args.folders[0])
    from benchmarks.common import environment, save_json

    # As an installed inr runs: its modules compiled once, not from source at every start (some
    # environments set PYTHONDONTWRITEBYTECODE).
    compileall.compile_dir(ROOT / "inr_cli", quiet=1)

    results = []
    for folder in args.folders:
        runs = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="inr-scale-") as out:
                runs.append(measure(folder, Path(out) / "set", args.cpus))
            print(json.dumps({"folder": str(folder), **runs[-1]}), flush=True)
        median = sorted(runs, key=lambda run: run["driver_cpu_s"])[len(runs) // 2]
        result = {"folder": str(folder), **median}
        if len(runs) > 1:
            result["runs"] = runs
        results.append(result)
    data = {**environment(), "command": " ".join(["fit-many FOLDER --ray LOCAL-CLUSTER", *FIT]), "cpus": args.cpus,
            "results": results}
    if args.out:
        save_json(data, args.out)


if __name__ == "__main__":
    main()
