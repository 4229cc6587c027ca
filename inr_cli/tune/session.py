"""One session of a study: trials drawn and run (here, or handed to the Ray runner), how each
ended told to Optuna, a line of progress for each (trials done, the best so far, the time left),
and the study's outputs brought up to date after each.

A trial that cannot finish here (Ctrl-C, its Ray worker lost) is told as failed and its settings
are queued again as a new trial: it counts once, when that one finishes. A draw that cannot be
trained (over --max-params, a configuration refused) is told as pruned, marked rejected and not
counted, so that the sampler learns the edge of the space.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from inr_cli.config import Config, to_json, with_values
from inr_cli.console import info
from inr_cli.core.training_loop import Interrupted, Signals
from inr_cli.errors import InrError
from inr_cli.progress import clock
from inr_cli.tune import require_optuna
from inr_cli.tune.outputs import (
    BEST_PNG,
    BEST_TOML,
    CURVES_SVG,
    HISTORY_SVG,
    IMPORTANCES_SVG,
    best_trial,
    counted,
    write_best_png,
    write_importances,
    write_progress,
)
from inr_cli.tune.sample import Sample
from inr_cli.tune.search import pruner_settings
from inr_cli.tune.space import MAX_REJECTED, Space, reject
from inr_cli.tune.storage import STUDY_NAME
from inr_cli.tune.trial import UNITS, Outcome, run_trial

START = "the configuration's own settings"  # the note of a study's first trial


@dataclass
class TuneResult:
    out: Path
    best: int  # the best trial's number
    value: float
    settings: dict  # the best trial's searched settings
    finished: int  # trials finished (complete or pruned)


def queue_again(study, trial) -> None:
    """A trial that will not finish (its process or worker died): failed, its settings queued anew."""
    study.tell(trial.number, state=_state("FAIL"), skip_if_finished=True)
    study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})


def _state(name: str):
    return getattr(require_optuna().trial.TrialState, name)


class Session:
    """This run of the study: drawing trials, recording how they ended, progress, the outputs.
    options: the study's TuneOptions (trials, objective, pruner, quiet)."""

    def __init__(self, optuna, study, storage, config: Config, space: Space, sample: Sample, options, out: Path):
        self.optuna, self.study, self.storage, self.config, self.space = optuna, study, storage, config, space
        self.sample, self.options, self.out = sample, options, out
        self.started = time.perf_counter()
        self.done_before = self.finished()

    def finished(self) -> int:
        return sum(counted(t) for t in self.study.get_trials(deepcopy=False))

    def draw(self):
        """The next trial and its settings; a draw that cannot be trained (over --max-params, a
        configuration refused) is told as pruned and not counted."""
        why = ""
        for _ in range(MAX_REJECTED):
            trial = self.study.ask()
            values = self.space.suggest(trial)
            trial.set_user_attr("settings", values)
            why = reject(self.config, self.space, values, self.sample.channels, self.sample.width, self.sample.height)
            if why is None:
                return trial, values
            trial.set_user_attr("rejected", True)
            trial.set_user_attr("note", why)
            self.study.tell(trial, state=_state("PRUNED"))
        raise InrError(f"{MAX_REJECTED} draws in a row could not be trained (the last: {why}); narrow the space "
                       f"with --search")

    def next_job(self, in_flight: int):
        """(the job of a Ray task, the trial and its settings), or None when enough run or are done."""
        if self.finished() + in_flight >= self.options.trials:
            return None
        trial, values = self.draw()
        storage = self.storage
        trial_id = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(STUDY_NAME),
                                                                   trial.number)
        job = {"out": str(self.out), "trial_id": trial_id, "number": trial.number, "params": trial.params,
               "config": to_json(with_values(self.config, values)), "objective": self.options.objective,
               "pruner": pruner_settings(self.options.pruner, self.config.training.steps, self.options.trials)}
        return job, (trial, values)

    def run_here(self) -> None:
        from inr_cli.backends import kernel_options, make_backend

        backend = make_backend(self.config.training.device, quiet=self.options.quiet,
                               **kernel_options(self.config.training))
        handle = None  # the trial in progress, until it is told
        with Signals() as signals:
            try:
                while (drawn := self.next_job(0)) is not None:
                    _, handle = drawn
                    trial, values = handle
                    try:
                        outcome = run_trial(backend, with_values(self.config, values), self.sample,
                                            self.options.objective, trial.number, trial, str(self.out), signals)
                    except Interrupted:
                        raise
                    except BaseException:
                        self.lose(handle, again=False)
                        raise
                    self.finish(handle, outcome)
                    handle = None
            except Interrupted as exc:  # Ctrl-C, SIGTERM: the trial in progress runs again on --resume
                signals.ignore()
                if handle is not None:
                    self.lose(handle)
                write_progress(self.study, self.space, self.options.objective, self.out)
                info(f"{exc}: {self.finished()} of {self.options.trials} trials are finished and kept in "
                     f"{self.out}; continue with the same command and --resume")
                raise SystemExit(128 + exc.signum) from None

    def lose(self, handle, again: bool = True) -> None:
        """A trial that will not finish here: failed, and with `again` its settings queued anew."""
        trial, _ = handle
        frozen = next(t for t in self.study.get_trials(deepcopy=False) if t.number == trial.number)
        if frozen.state != _state("RUNNING"):  # told already (a signal that came as it ended)
            return
        if again:
            queue_again(self.study, frozen)
        else:
            self.study.tell(trial, state=_state("FAIL"))

    def finish(self, handle, outcome: Outcome) -> None:
        trial, _ = handle
        for key in ("psnr", "steps", "seconds", "losses", "config"):
            trial.set_user_attr(key, getattr(outcome, key))
        if outcome.note:
            trial.set_user_attr("note", outcome.note)
        if outcome.state == "complete":
            self.study.tell(trial, outcome.value)
        else:
            self.study.tell(trial, state=_state("PRUNED"))
        best = best_trial(self.study)
        if outcome.state == "complete" and best is not None and best.number == trial.number:
            write_best_png(outcome.renders, self.sample, self.out)
        write_progress(self.study, self.space, self.options.objective, self.out)
        if not self.options.quiet:
            info(self._line(trial, outcome, best))

    def _line(self, trial, outcome: Outcome, best) -> str:
        done, total = self.finished(), self.options.trials
        objective = self.options.objective
        if outcome.state == "complete":
            what = _value(outcome.value, objective) + (f" ({outcome.psnr:.2f} dB)" if objective != "psnr" else "")
        else:
            what = f"{outcome.note} ({outcome.psnr:.2f} dB)"
        ran = done - self.done_before
        elapsed = time.perf_counter() - self.started
        left = elapsed / ran * (total - done) if ran else float("nan")
        best_text = f"best {_value(best.value, self.options.objective)} (trial {best.number})" if best else "none yet"
        label = f"trial {trial.number}" + (f" ({START})" if trial.user_attrs.get("note") == START else "")
        return f"{label}: {what}; {done}/{total} done, {best_text}, {clock(elapsed)} elapsed, about " \
               f"{clock(left)} left"

    def conclude(self) -> TuneResult:
        """The outputs written, importances among them, and the best said."""
        write_progress(self.study, self.space, self.options.objective, self.out)
        importances = write_importances(self.optuna, self.study, self.out)
        best = best_trial(self.study)
        if best is None:
            raise InrError(f"no trial finished: every one was pruned or diverged (see {self.out / 'trials.csv'}); "
                           f"move the space with --search")
        if not self.options.quiet:
            settings = ", ".join(f"{key} {value:.4g}" for key, value in best.user_attrs["settings"].items())
            command = " ".join(filter(None, ["inr fit-many" if self.sample.folder else "inr train", self.sample.source,
                                             "-o SET" if self.sample.folder else ""]))
            pictures = [BEST_PNG, HISTORY_SVG, CURVES_SVG] + ([IMPORTANCES_SVG] if importances else [])
            info(f"best: trial {best.number}, {_value(best.value, self.options.objective)}: {settings}. Pictures in "
                 f"{self.out} ({', '.join(pictures)}); train with: {command} --config {self.out / BEST_TOML}")
        return TuneResult(self.out, best.number, best.value, dict(best.user_attrs["settings"]), self.finished())


def _value(value: float, objective: str) -> str:
    if objective == "psnr":
        return f"{value:.2f} dB"
    if objective == "steps":
        return f"{value:.0f} steps"
    return f"{value:.3g} {UNITS[objective]}"


