"""`inr fit-many --ray`: the shards of a plan fitted by workers on a Ray cluster.

Ray does the scheduling, the placement on GPUs and the restarting of dead processes; this file only
says what a worker is (ShardWorker: it loads the kernels once and fits shard after shard) and keeps
every worker busy. The driver sends each shard's pixels through Ray's object store, so the workers
need no shared file system, and writes each finished shard itself, atomically, as it arrives. A
worker that dies mid-shard is restarted by Ray and its shard sent again; a driver that dies loses
only the shards in flight, and the same command finishes the set.
"""

from __future__ import annotations

import os
from pathlib import Path

from inr_cli.console import notice
from inr_cli.errors import InrError
from inr_cli.hooks import hook
from inr_cli.sets.fit_many import SHARDS, Plan, fit_shard, shard_images, write_shard


class ShardWorker:
    """One per GPU (or per machine's CPUs): the backend, and with it the compiled kernels, made once."""

    def __init__(self, plan_json: str, out: str):
        from inr_cli.backends import make_backend

        self.plan = Plan.from_json(plan_json)
        self.out = Path(out)
        training = self.plan.config.training
        self.backend = make_backend(training.device, training.matmul, quiet=True)

    def fit(self, names: list[str], images) -> dict:
        hook("shard-start", names=names, out=self.out)
        return fit_shard(self.backend, self.plan, images, names)


def connect(address: str):
    try:
        import ray
    except ImportError:
        raise InrError("--ray needs Ray: pip install 'inr[cluster]'") from None
    if not ray.is_initialized():
        try:
            if address == "local":
                ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
            else:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise InrError(f"--ray {address}: cannot join the cluster ({str(exc).splitlines()[0]})") from None
    return ray


def worker_options(ray, plan: Plan, workers: int | None) -> tuple[int, dict]:
    resources = ray.cluster_resources()
    gpus, cpus = int(resources.get("GPU", 0)), int(resources.get("CPU", 1))
    device = plan.config.training.device
    if device == "gpu" or (device == "auto" and gpus > 0):
        if gpus == 0:
            raise InrError("--device gpu: the Ray cluster has no GPU")
        return workers or gpus, {"num_gpus": 1, "num_cpus": 1}
    # A CPU worker's NumPy uses the cores of its machine: by default one worker per machine's worth.
    per_worker = max(1, cpus // workers) if workers else max(1, min(cpus, os.cpu_count() or 1))
    return workers or max(1, cpus // per_worker), {"num_cpus": per_worker}


def run_on_ray(address: str, plan: Plan, out: Path, pending: list[int], on_shard, workers: int | None) -> None:
    ray = connect(address)
    count, options = worker_options(ray, plan, workers)
    # A dead worker is restarted without end; its shard comes back to us as an error and is resent,
    # so that the loss of a worker is said, not hidden.
    # The driver's INR_ settings (the hooks a test arms, say) travel to the workers.
    settings = {name: value for name, value in os.environ.items() if name.startswith("INR_")}
    remote = ray.remote(max_restarts=-1, max_task_retries=0, runtime_env={"env_vars": settings},
                        **options)(ShardWorker)
    plan_json = plan.to_json()
    pool = [remote.remote(plan_json, str(out)) for _ in range(min(count, len(pending)) or 1)]
    queue = list(pending)
    running: dict = {}

    def submit(worker) -> None:
        index = queue.pop(0)
        images = shard_images(plan, index)
        running[worker.fit.remote(plan.shards[index], images)] = (index, worker)

    for worker in pool:
        if queue:
            submit(worker)
    while running:
        ready, _ = ray.wait(list(running), num_returns=1)
        index, worker = running.pop(ready[0])
        try:
            result = ray.get(ready[0])
        except ray.exceptions.RayActorError:
            notice(f"a worker died while fitting shard {index}; Ray restarts it and the shard is sent again")
            queue.insert(0, index)
            submit(worker)
            continue
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, InrError):  # a pack that diverged, an image that does not decode
                raise exc.cause from None
            raise InrError(f"shard {index} failed on a worker: {str(exc).strip().splitlines()[-1]}") from None
        write_shard(out, index, result)
        on_shard(index, result)
        hook("shard-written", shards=out / SHARDS)
        if queue:
            submit(worker)

