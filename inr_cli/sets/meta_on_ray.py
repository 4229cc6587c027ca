"""`inr meta-init --ray ADDRESS`: the inner fits of each outer step (and of each held-out measure)
as calls to MetaWorkers on a Ray cluster; the driver draws the images, sends the start and moves it.

The images of a meta-init are few and small: the driver reads them (as it does without Ray) and
sends each call its images' pixels, so that the workers need no shared storage. The images of a
call are split over the workers, one part each; each image's fit is its own (its own seed, and a
network's fit does not depend on the others of its pack), so the adapted weights, gathered in the
order drawn, and with them the start, are the in-process run's to the bit (on nodes whose processors
get the same BLAS kernel as the driver's; within rounding on others).

Workers are placed as fit-many's (cluster.place_workers) and started within its deadline
(cluster.start_workers, INR_RAY_START_TIMEOUT); every wait on Ray is short (cluster.POLL), so that a
signal ends the command at once, checkpointed. A part lost with its worker or node is sent again to
another worker (Ray restarts a dead one on its node), and said; one lost MAX_ATTEMPTS times stops
the command naming its images. A part fitting STRAGGLER_FACTOR times longer than the parts before it
is sent to an idle worker too, and the first result is kept.
"""

from __future__ import annotations

import time

import numpy as np

from inr_cli import config as configuration
from inr_cli.config import Config
from inr_cli.console import notice
from inr_cli.core.network import NetworkSpec
from inr_cli.core.pixels import PixelImage
from inr_cli.errors import InrError
from inr_cli.hooks import hook
from inr_cli.sets.cluster import (
    MAX_ATTEMPTS,
    POLL,
    STRAGGLER_FACTOR,
    STRAGGLER_FLOOR,
    connect,
    interruptible,
    loss_reason,
    lost_errors,
    place_workers,
    ray_call,
    start_workers,
    wait_ready,
    worker_backend,
)
from inr_cli.sets.meta import inner_fit


class MetaWorker:
    """One per GPU share (or per machine's CPUs), as fit-many's ShardWorker: the backend made once,
    then one part of an outer step's images fitted per call."""

    def __init__(self, settings: dict):
        self.config = configuration.from_json(settings["config"])
        self.spec = NetworkSpec.from_json(settings["spec"])
        self.backend, self.problem, self.fallback, self.where = worker_backend(self.config, settings)

    def check(self, sample=None) -> dict:
        """What cluster.start_workers asks of a worker before it gets work (the images come with
        each call: it reaches them)."""
        return {"problem": f"{self.where}: {self.problem}" if self.problem else None,
                "fallback": f"{self.where}: {self.fallback}" if self.fallback else None, "where": self.where,
                "backend": self.backend.name if self.backend else None, "reaches": True}

    def fit(self, start: np.ndarray, images: list[PixelImage], seeds: list[int],
            names: list[str]) -> tuple[np.ndarray, np.ndarray]:
        hook("meta-fit-start", names=names)
        return inner_fit(self.backend, self.spec, self.config, start, images, seeds)


class Part:
    """Some of a call's images, sent to one worker (and to another when lost or late)."""

    def __init__(self, chosen: list[int]):
        self.chosen = chosen  # the images' indices
        self.losses: list[str] = []
        self.resent = False  # sent to a second worker as a straggler
        self.result = None


class OnRay:
    """The inner fits on a Ray cluster (a meta.learn_start runner)."""

    def __init__(self, address: str, workers: int | None, gpus_per_worker: float | None):
        with interruptible("while joining the Ray cluster"):
            self.ray = connect(address)
        self.where = f"Ray ({address})"
        self.workers, self.gpus_per_worker = workers, gpus_per_worker
        self.pool: list = []  # cluster.Worker: trusted once it answered its check
        self.pings: dict = {}  # check call -> the worker asked (after a loss, until it answers)
        self.per_image: list[float] = []  # seconds per image of each part fitted: the straggler's limit

    def prepare(self, spec: NetworkSpec, inner: Config, images: list[PixelImage], names: list[str],
                seeds: list[int]) -> None:
        ray = self.ray
        device = inner.training.device
        places = place_workers(ray.nodes(), device, self.workers, self.gpus_per_worker)
        settings = {"config": configuration.to_json(inner), "spec": spec.to_json(),
                    "gpu_asked": device == "gpu" or bool(self.gpus_per_worker)}
        remote = ray.remote(max_restarts=-1, max_task_retries=0)(MetaWorker)
        self.pool = start_workers(ray, remote, places, settings, None)
        self.images, self.names, self.seeds = images, names, seeds
        self.lost = lost_errors(ray)

    def close(self) -> None:
        for worker in self.pool:
            self.ray.kill(worker.actor, no_restart=True)
        self.pool = []

    def fit(self, start: np.ndarray, chosen) -> tuple[np.ndarray, np.ndarray]:
        """The images at `chosen` fitted from `start`, in parts over the workers: (params [n, P],
        losses [n]) in the order of `chosen`."""
        chosen = [int(i) for i in chosen]
        if not self.pool:
            raise InrError("no Ray worker is left to fit the inner steps; the checkpoint is kept")
        bounds = np.linspace(0, len(chosen), min(len(self.pool), len(chosen)) + 1).round().astype(int)
        parts = [Part(chosen[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
        start_ref = self.ray.put(np.ascontiguousarray(start, dtype=np.float32))
        queue = list(parts)  # parts to send, each to the next idle worker
        calls: dict = {}  # call -> (part, worker, when sent)
        while any(part.result is None for part in parts):
            for worker in self.pool:
                busy = any(worker is other for _, other, _ in calls.values())
                while queue and queue[0].result is not None:
                    queue.pop(0)
                if queue and worker.trusted and not busy:
                    self.send(calls, start_ref, queue.pop(0), worker)
            if not calls and not self.pings:
                raise InrError("no Ray worker is left to fit the inner steps (each died while starting again); the "
                               "checkpoint is kept")
            for ref in wait_ready(self.ray, list(calls) + list(self.pings), POLL):
                if ref in self.pings:
                    self.answered(ref)
                else:
                    self.returned(ref, *calls.pop(ref), queue, calls)
            self.stragglers(calls, start_ref)
        for _, loser, _ in calls.values():
            # A straggler's losing copy would hold its worker (one call at a time) into the next
            # outer step: the worker is restarted, and checked before it gets work again.
            self.ray.kill(loser.actor, no_restart=False)
            self.ask(loser)
        return np.concatenate([part.result[0] for part in parts]), np.concatenate([part.result[1] for part in parts])

    def send(self, calls: dict, start_ref, part: Part, worker) -> None:
        images = [self.images[i] for i in part.chosen]
        call = worker.actor.fit.remote(start_ref, images, [self.seeds[i] for i in part.chosen],
                                       [self.names[i] for i in part.chosen])
        calls[call] = (part, worker, time.monotonic())

    def returned(self, ref, part: Part, worker, sent: float, queue: list, calls: dict) -> None:
        ray = self.ray
        try:
            result = ray_call(ray.get, ref, timeout=POLL)
        except self.lost + (ray.exceptions.ActorUnavailableError,) as exc:
            self.ask(worker)
            if part.result is not None or any(other is part for other, _, _ in calls.values()):
                return  # a straggler's copy: the other one finished, or is still fitting
            reason = loss_reason(ray, exc)
            part.losses.append(reason)
            listed = ", ".join(self.names[i] for i in part.chosen)
            if len(part.losses) >= MAX_ATTEMPTS:
                raise InrError(f"the inner fit of {listed} was lost {len(part.losses)} times ({reason}); one of these "
                               f"images may crash the workers. The checkpoint is kept") from None
            notice(f"the inner fit of {listed} was lost on {worker.place.address} ({reason}); it is sent again")
            queue.insert(0, part)
            return
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, InrError):
                raise exc.cause from None
            raise InrError(f"an inner fit failed on a worker on {worker.place.address}: "
                           f"{str(exc).strip().splitlines()[-1]}") from None
        if part.result is None:
            part.result = result
            self.per_image.append((time.monotonic() - sent) / len(part.chosen))

    def ask(self, worker) -> None:
        """A worker whose call was lost gets no work until it answers its check (Ray restarts it)."""
        worker.trusted = False
        if not any(worker is other for other in self.pings.values()):
            self.pings[worker.actor.check.remote()] = worker

    def answered(self, ref) -> None:
        worker = self.pings.pop(ref)
        try:
            check = ray_call(self.ray.get, ref, timeout=POLL)
        except self.lost + (self.ray.exceptions.ActorUnavailableError,) as exc:
            worker.starts += 1
            if worker.starts < MAX_ATTEMPTS:
                self.pings[worker.actor.check.remote()] = worker
                return
            notice(f"the Ray worker on {worker.place.address} died {worker.starts} times while starting again "
                   f"({loss_reason(self.ray, exc)}); it is left out")
            self.leave_out(worker)
            return
        if check["problem"]:
            notice(f"{check['problem']}; that worker is left out")
            self.leave_out(worker)
            return
        worker.trusted = True

    def leave_out(self, worker) -> None:
        self.ray.kill(worker.actor, no_restart=True)
        self.pool.remove(worker)

    def stragglers(self, calls: dict, start_ref) -> None:
        """A part fitting past STRAGGLER_FACTOR times what the parts before it took (per image) is
        sent to an idle worker too; the first result is kept."""
        if not self.per_image:
            return
        typical, now = float(np.median(self.per_image)), time.monotonic()
        for part, worker, sent in list(calls.values()):
            limit = max(STRAGGLER_FLOOR, STRAGGLER_FACTOR * typical * len(part.chosen))
            if part.resent or part.result is not None or now - sent <= limit:
                continue
            idle = [w for w in self.pool if w.trusted and not any(w is busy for _, busy, _ in calls.values())]
            if not idle:
                return
            part.resent = True
            notice(f"an inner fit has been running on {worker.place.address} for {now - sent:.0f} s, "
                   f"{STRAGGLER_FACTOR}x the others: it is sent to {idle[0].place.address} too, and the first result "
                   f"is kept")
            self.send(calls, start_ref, part, idle[0])
