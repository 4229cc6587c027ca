"""`inr tune --ray`: trials as Ray tasks, several at once, one per GPU (or share of one) or per
machine's worth of CPUs (as fit-many places its workers).

The driver draws each trial's settings (the one sampler, seeded) and tells Optuna how it ended; the
task fits the sample and reports its readings to the study's journal itself, so the pruner compares
it with every other trial as it runs: the study folder must be on storage the workers share (one
machine, or a shared file system), as fit-many's output must. A task lost with its worker or node
is told to Optuna as failed and its settings are queued again as a new trial, said on stderr; it
counts once, when that one finishes. Ray's own retry is off, so that no trial reports twice.
"""

from __future__ import annotations

import os

from inr_cli.backends import kernel_options, make_backend
from inr_cli.config import from_json
from inr_cli.console import info, notice
from inr_cli.errors import InrError
from inr_cli.sets.cluster import connect, place_workers
from inr_cli.tune import require_optuna
from inr_cli.tune.sample import Sample
from inr_cli.tune.search import make_pruner, quiet_optuna
from inr_cli.tune.storage import STUDY_NAME, open_storage
from inr_cli.tune.trial import Outcome, run_trial

MAX_LOSSES = 3  # the same settings lost this many times: they crash their workers, not bad luck


def lost_errors(ray) -> tuple:
    """What Ray raises for a task whose worker, node or result was lost (not an error of the trial)."""
    names = ("WorkerCrashedError", "NodeDiedError", "OwnerDiedError", "ObjectLostError", "OutOfMemoryError")
    return tuple(getattr(ray.exceptions, name) for name in names if hasattr(ray.exceptions, name))


def trial_task(job: dict, sample: Sample) -> Outcome:
    """One trial on a Ray worker: the study opened from its journal, the trial fitted and reported."""
    optuna = require_optuna()
    quiet_optuna(optuna)
    if not os.access(job["out"], os.W_OK):
        raise InrError(f"a Ray worker cannot write to the study folder {job['out']}: it must be on storage the "
                       f"workers share")
    study = optuna.load_study(study_name=STUDY_NAME, storage=open_storage(job["out"]),
                              sampler=optuna.samplers.RandomSampler(), pruner=make_pruner(optuna, job["pruner"]))
    trial = optuna.trial.Trial(study, job["trial_id"])
    config = from_json(job["config"])
    backend = make_backend(config.training.device, quiet=True, **kernel_options(config.training))
    return run_trial(backend, config, sample, job["objective"], job["number"], trial, job["out"])


def trial_options(nodes: list[dict], device: str, workers: int | None, gpus_per_trial: float | None
                  ) -> tuple[int, dict]:
    """How many trials run at once and what each task asks for, from the places fit-many's workers
    would take on these nodes (sets/cluster.place_workers): the GPU places where there are any, else
    the CPU places, each task asking for the least of them so that it fits on every such node."""
    places = place_workers(nodes, device, workers, gpus_per_trial)
    kind = "gpu" if any(place.kind == "gpu" for place in places) else "cpu"
    chosen = [place for place in places if place.kind == kind]
    if kind == "gpu":
        return len(chosen), chosen[0].options
    return len(chosen), {"num_cpus": min(place.options["num_cpus"] for place in chosen)}


class OnRay:
    """Trials run as Ray tasks (the driver's runner for --ray)."""

    def __init__(self, address: str, device: str, workers: int | None, gpus_per_trial: float | None):
        self.ray = connect(address)
        self.parallel, self.options = trial_options(self.ray.nodes(), device, workers, gpus_per_trial)
        self.where = (f"Ray ({address}): {self.parallel} trials at once, {self.options.get('num_gpus', 0):g} GPU and "
                      f"{self.options.get('num_cpus', 0)} CPU each")

    def run(self, sample: Sample, next_trial, finish, lose, quiet: bool) -> None:
        """next_trial(in_flight) -> (job, handle) or None when enough are running or done; finish(handle,
        outcome) when a task returns; lose(handle) when its worker died (the settings run again)."""
        ray = self.ray
        task = ray.remote(max_retries=0, **self.options)(trial_task)
        sample_ref = ray.put(sample)
        running: dict = {}
        retryable = lost_errors(ray)
        losses: dict = {}
        while True:
            while len(running) < self.parallel:
                drawn = next_trial(len(running))
                if drawn is None:
                    break
                job, handle = drawn
                running[task.remote(job, sample_ref)] = (job, handle)
            if not running:
                return
            ready, _ = ray.wait(list(running), num_returns=1)
            job, handle = running.pop(ready[0])
            try:
                outcome = ray.get(ready[0])
            except retryable as exc:
                settings = repr(sorted(job["params"].items()))
                losses[settings] = losses.get(settings, 0) + 1
                lose(handle)
                if losses[settings] >= MAX_LOSSES:
                    raise InrError(f"trial {job['number']}'s settings were lost {losses[settings]} times "
                                   f"({type(exc).__name__}); they may crash the workers. The finished trials "
                                   f"are kept") from None
                if not quiet:
                    notice(f"trial {job['number']} was lost ({type(exc).__name__}: a worker or its node died); its "
                           f"settings run again as a new trial")
                continue
            except ray.exceptions.RayTaskError as exc:
                lose(handle, again=False)
                if isinstance(exc.cause, InrError):
                    raise exc.cause from None
                raise InrError(f"trial {job['number']} failed on a worker: "
                               f"{str(exc).strip().splitlines()[-1]}") from None
            finish(handle, outcome)

    def say_where(self, quiet: bool) -> None:
        if not quiet:
            info(self.where)
