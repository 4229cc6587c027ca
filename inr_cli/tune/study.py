"""`inr tune IMAGE|FOLDER -o DIR`: a study of the fitting settings, for the command (and any caller).

The configuration is built as `inr train` builds it; what is given on the command line stays
fixed, the space (space.py) is searched, trial by trial, in this process or as Ray tasks. The study
lives in DIR (storage.py): a study killed at any moment resumes with the same command and --resume,
keeping every finished trial; a trial that was running then (or lost with its Ray worker) is marked
failed and its settings are queued again as a new trial, so that it counts once. The first trial of
a study is the configuration's own settings (the preset's, or a --config file's), where they lie in
the space: what the study finds is measured beside what a person would start from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from inr_cli import config as configuration
from inr_cli.config import Config, build_config, flags_to_values
from inr_cli.console import info, notice
from inr_cli.errors import InrError, UsageError
from inr_cli.formats.data import SAMPLE, fingerprint, same_data
from inr_cli.formats.start import start_network
from inr_cli.outputs import folder_output, make_folder, refuse_dangling, writable
from inr_cli.sets import inputs
from inr_cli.tune import require_optuna
from inr_cli.tune.outputs import counted
from inr_cli.tune.sample import Sample, load_sample
from inr_cli.tune.search import PRUNERS, make_pruner, make_sampler, pruner_settings, quiet_optuna
from inr_cli.tune.session import START, Session, TuneResult, queue_again
from inr_cli.tune.space import Space, build_space, start_parameters
from inr_cli.tune.storage import (
    DEFINITION,
    JOURNAL,
    STUDY_NAME,
    check_journal,
    has_study,
    holds_study,
    open_storage,
    study_lock,
)
from inr_cli.tune.trial import DIRECTIONS, OBJECTIVES


@dataclass
class TuneOptions:
    """The study's own options (the settings come as flags, --set, --config and --preset)."""

    trials: int = 20
    sample: int = 8  # images of a folder fitted by each trial
    objective: str = "psnr"
    target_psnr: float | None = None
    pruner: str = "halving"
    max_params: int | None = None
    searches: tuple[str, ...] = ()  # KEY=LOW:HIGH[:log]
    resume: bool = False
    ray: str | None = None
    workers: int | None = None
    gpus_per_trial: float | None = None
    quiet: bool = False


def check_options(options: TuneOptions) -> None:
    if options.trials <= 0:
        raise UsageError(f"--trials must be a positive number of trials, got {options.trials}")
    if options.objective not in OBJECTIVES:
        raise UsageError(f"--objective '{options.objective}' is not one of: {', '.join(OBJECTIVES)}")
    if options.pruner not in PRUNERS:
        raise UsageError(f"--pruner '{options.pruner}' is not one of: {', '.join(PRUNERS)}")
    if options.target_psnr is not None and options.target_psnr <= 0:
        raise UsageError(f"--target-psnr must be a positive number of dB, got {options.target_psnr:g}")
    if options.workers is not None and options.workers <= 0:
        raise UsageError(f"--workers must be positive, got {options.workers}")
    share = options.gpus_per_trial
    if share is not None and not (share > 0 and (share <= 1 or float(share).is_integer())):
        raise UsageError(f"--gpus-per-trial must be a share of one GPU (0 < F <= 1) or a whole number, "
                         f"got {options.gpus_per_trial:g}")
    if (options.workers is not None or options.gpus_per_trial is not None) and not options.ray:
        raise UsageError("--workers and --gpus-per-trial place Ray tasks: they need --ray")


def study_config(source: str, flags: dict, config_file: Path | None, preset: str | None,
                 options: TuneOptions) -> tuple[Config, set[str]]:
    """The configuration every trial starts from, and the keys given on the command line (fixed)."""
    values = flags_to_values(flags)
    fixed = set(values)
    if options.target_psnr is not None:
        given = values.get("training.target_psnr")
        if given and given != options.target_psnr:
            raise UsageError(f"--target-psnr {options.target_psnr:g} and --until-psnr {given:g} differ; give one")
        values["training.target_psnr"] = options.target_psnr
    if source in ("", SAMPLE):
        values["data.source"] = ""
    else:
        values["data.source"] = source if inputs.is_url(source) else str(Path(source).resolve())
    config = build_config(config_file, values, preset, start=start_network(values, preset, config_file))
    target = config.training.target_psnr
    if options.objective == "steps" and not target:
        raise UsageError("--objective steps counts the steps to a PSNR: give it with --target-psnr DB")
    if options.objective != "steps" and target:
        raise UsageError(f"a target PSNR ({target:g} dB) stops trials early: it goes with --objective steps")
    return config, fixed


def tune(source: str, out: str | Path, flags: dict, config_file: Path | None = None, preset: str | None = None,
         options: TuneOptions | None = None) -> TuneResult:
    """Run (or resume) the study in `out`; flags: {flag name: value} as inr train takes them."""
    options = options or TuneOptions()
    optuna = require_optuna()
    quiet_optuna(optuna)
    check_options(options)
    config, fixed = study_config(source, flags, config_file, preset, options)
    refuse_dangling(Path(out))  # before resolving, which would follow it
    out = Path(out).resolve()
    folder_output(out, holds_study, "study of inr tune", protected=[config.data.source, config_file or ""],
                  inside=[config.data.source])
    writable(out / JOURNAL)
    notices: list[str] = []
    sample = load_sample(source, config, options.sample, notices)
    space = build_space(config, fixed, list(options.searches), options.max_params, sample.channels, sample.width,
                        sample.height)
    make_folder(out)
    runner = None
    if options.ray:
        from inr_cli.tune.on_ray import OnRay

        runner = OnRay(options.ray, config.training.device, options.workers, options.gpus_per_trial)
    with study_lock(out):
        study, storage, done = open_study(optuna, out, config, space, sample, options,
                                          runner.parallel if runner else 1)
        if not options.quiet:
            for message in notices:
                notice(message)
            _say_start(config, space, sample, options, out, done, runner)
        session = Session(optuna, study, storage, config, space, sample, options, out)
        if done < options.trials:
            if runner is None:
                session.run_here()
            else:
                runner.run(sample, session.next_job, session.finish, session.lose, options.quiet)
        elif not options.quiet:
            info(f"{out} has {done} finished trials already; pass --trials N (more than {done}) to run more")
        return session.conclude()


def definition(config: Config, space: Space, sample: Sample, options: TuneOptions) -> dict:
    """What a resumed study must be run with again: all but the number of trials and where they run."""
    return json.loads(json.dumps({"source": config.data.source, "images": sample.names, "objective": options.objective,
                                  "pruner": options.pruner, "space": space.to_json(),
                                  "settings": configuration.fitted_settings(config),
                                  "fingerprints": [fingerprint(image) for image in sample.images]}))


def open_study(optuna, out: Path, config: Config, space: Space, sample: Sample, options: TuneOptions,
               parallel: int):
    """The study in `out`, new or resumed (its running trials from before queued again), its storage,
    and how many trials it has finished."""
    check_journal(out)
    exists = has_study(out)
    if exists and not options.resume:
        raise UsageError(f"{out} holds a study already: continue it with --resume, or pick another -o")
    if not exists and options.resume:
        raise UsageError(f"--resume: there is no study in {out} to continue")
    wanted = definition(config, space, sample, options)
    storage = open_storage(out)
    held = 0
    if exists:
        try:
            saved = optuna.load_study(study_name=STUDY_NAME, storage=storage)
        except KeyError:
            raise InrError(f"{out}: its study.journal holds no study of inr tune") from None
        _refuse_changes(out, saved.user_attrs.get(DEFINITION, {}), wanted, sample.images)
        held = len(saved.trials)
    study = optuna.create_study(
        storage=storage, study_name=STUDY_NAME, direction=DIRECTIONS[options.objective], load_if_exists=True,
        sampler=make_sampler(optuna, config.training.seed, held, options.trials, parallel),
        pruner=make_pruner(optuna, pruner_settings(options.pruner, config.training.steps, options.trials)))
    if not exists:
        study.set_user_attr(DEFINITION, wanted)
        start = start_parameters(space, config, sample.channels, sample.width, sample.height)
        if start:
            study.enqueue_trial(start, user_attrs={"note": START})
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        queue_again(study, trial)
        if not options.quiet:
            notice(f"trial {trial.number} was running when the study stopped: its settings run again as a new trial")
    return study, storage, sum(counted(t) for t in study.get_trials(deepcopy=False))


def _refuse_changes(out: Path, saved: dict, wanted: dict, images: list) -> None:
    if not isinstance(saved, dict) or not isinstance(saved.get("settings", {}), dict):
        raise InrError(f"{out / JOURNAL}: its record of how the study was started is damaged; pick another -o")
    for key in ("source", "images", "objective", "pruner", "space"):
        if saved.get(key) != wanted[key]:
            what = {"images": "sample of images", "space": "space to search", "source": "image or folder"}.get(key, key)
            raise UsageError(f"{out} was started with another {what}; resume it with the options it was started "
                             f"with, or pick another -o")
    known = saved.get("fingerprints")  # a study of an older inr has none
    if known is not None and known != wanted["fingerprints"]:
        known = known if isinstance(known, list) and len(known) == len(images) else [None] * len(images)
        changed = next((name for name, old, image in zip(wanted["images"], known, images) if not same_data(image, old)),
                       None)
        if changed is not None:
            raise InrError(f"{changed} has changed since the study in {out} started (its pixels differ); resume it on "
                           f"the images it was started on, or pick another -o")
    started = {**configuration.ADDED_KEYS, **saved.get("settings", {})}  # a study of an older inr lacks the newer keys
    for key, value in wanted["settings"].items():
        if started.get(key) != value:
            raise UsageError(f"{out} was started with {key} = {started.get(key)!r}, not {value!r}; resume it with the "
                             f"options it was started with, or pick another -o")


def _say_start(config: Config, space: Space, sample: Sample, options: TuneOptions, out: Path, done: int,
               runner) -> None:
    net = config.network
    where = runner.where if runner is not None else "this process"
    info(f"tuning {len(space.dimensions)} settings of {net.model} on {sample.describe()}: {options.trials} trials of "
         f"{config.training.steps} steps, objective {options.objective}, TPE (seed {config.training.seed}), "
         f"{options.pruner} pruner, in {where} -> {out}" + (f" ({done} finished before)" if done else ""))
    if sample.folder:
        shown = ", ".join(sample.names[:6]) + (f" and {len(sample.names) - 6} more" if len(sample.names) > 6 else "")
        info(f"sample (seed {config.training.seed}): {shown}")
    info("searching: " + "; ".join(space.describe())
         + (f"; at most {space.max_params:,} parameters" if space.max_params else ""))
