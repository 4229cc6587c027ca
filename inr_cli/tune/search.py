"""The study's sampler and pruner, made the same way by the driver and by a Ray worker.

TPE draws the settings (seeded; multivariate, since the learning rate and the frequency act
together; with several trials at once each running trial counts as a poor result until it ends, so
that two workers are not sent the same point). The pruner stops a trial at a loss reading where it
lags: successive halving (the default: at a tenth of the steps, then at twice that and so on, a
trial goes on only while it is in the better half of every trial that reached that step), the
median pruner (the median of the finished trials' readings at that step, once a few have finished
and past the first tenth of the steps), Hyperband, or none.

Why halving by default: the median pruner runs its start-up trials in full and then ranks a trial
against the finished ones only, so what a study spends depends on how good those few happened to
be, and on the studies measured it spent more than half of its full trials' steps. Halving ranks a
trial against every trial that got as far, the stopped ones included, so about half go on at each
check and the share a study spends stays well under half. Its first check waits a tenth of the
steps (a setting that memorises fast can start slowly), and it keeps the better half, not a
quarter: the stricter cut lost the best settings more often.
"""

from __future__ import annotations

import warnings

import numpy as np

PRUNERS = ("halving", "median", "hyperband", "none")


def quiet_optuna(optuna) -> None:
    """Optuna's own log lines and its warnings about experimental options stay off stderr: the
    study says what happens in its own words."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def pruner_settings(kind: str, steps: int, trials: int) -> dict:
    """What make_pruner needs, as plain values (a Ray worker gets them in its job)."""
    return {"kind": kind, "steps": steps, "startup": min(5, max(2, trials // 4))}


def make_pruner(optuna, settings: dict):
    kind, steps = settings["kind"], settings["steps"]
    if kind == "halving":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(1, steps // 10), reduction_factor=2)
    if kind == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=settings["startup"], n_warmup_steps=steps // 10)
    if kind == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=max(1, steps // 27), max_resource=steps,
                                              reduction_factor=3)
    return optuna.pruners.NopPruner()


def make_sampler(optuna, seed: int, trials_so_far: int, trials: int, parallel: int):
    """TPE seeded from the study's seed and how many trials it holds: a resumed study goes on drawing
    new points instead of the ones its first session began with."""
    session_seed = int(np.random.SeedSequence([seed, trials_so_far]).generate_state(1)[0])
    return optuna.samplers.TPESampler(seed=session_seed, multivariate=True, constant_liar=parallel > 1,
                                      n_startup_trials=min(10, max(3, trials // 3)))
