"""What a study leaves in its folder for a person, rewritten after every finished trial so that a
study stopped at any moment has them up to date:

    best.toml        the best trial's configuration: `inr train --config best.toml` (or fit-many's)
    best.png         the sample's images beside the best trial's renders and their error
    trials.csv       one row per trial: number, state, value, PSNR, steps, seconds, settings, note
    history.svg      the objective trial by trial, the best so far
    curves.svg       every trial's readings against the step, the pruned ones grey
    importances.svg  how much each setting mattered (at the end of a session)
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np

from inr_cli.config import from_json, to_toml
from inr_cli.console import notice
from inr_cli.core.metrics import psnr
from inr_cli.core.pixels import PixelImage
from inr_cli.errors import InrError
from inr_cli.formats.atomic import atomic_write_text
from inr_cli.formats.images import save_image
from inr_cli.runs.pictures import side_by_side
from inr_cli.tune.charts import curves_svg, history_svg, importances_svg
from inr_cli.tune.sample import Sample
from inr_cli.tune.space import Space

BEST_TOML, BEST_PNG, TRIALS_CSV = "best.toml", "best.png", "trials.csv"
HISTORY_SVG, CURVES_SVG, IMPORTANCES_SVG = "history.svg", "curves.svg", "importances.svg"
READING_WHAT = {"psnr": "training PSNR (dB)", "steps": "dB still below the target",
                "psnr-per-second": "PSNR per second at this pace (dB/s)"}
OBJECTIVE_WHAT = {"psnr": "mean PSNR (dB)", "steps": "steps to the target", "psnr-per-second": "PSNR per second (dB/s)"}


def counted(trial) -> bool:
    """A trial that counts toward the study's trials: finished (complete or pruned), not rejected
    before it trained."""
    return trial.state.name in ("COMPLETE", "PRUNED") and not trial.user_attrs.get("rejected")


def best_trial(study):
    complete = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    return study.best_trial if complete else None


def trials_table(study, space: Space) -> str:
    trials = study.get_trials(deepcopy=False)
    again = {t.user_attrs["retry_of"]: t.number for t in trials if "retry_of" in t.user_attrs}
    keys = [d.key for d in space.dimensions]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["number", "state", "value", "psnr", "steps", "seconds", *keys, "note"])
    for t in trials:
        attrs = t.user_attrs
        settings = attrs.get("settings", {})
        note = attrs.get("note", "")
        if t.state.name == "FAIL" and t.number in again:
            note = f"lost; run again as trial {again[t.number]}"
        elif "retry_of" in attrs:
            note = "; ".join(filter(None, [note, f"again: trial {attrs['retry_of']} was lost"]))
        value = t.value if t.state.name == "COMPLETE" else None  # a pruned trial's is a reading's, not the objective
        writer.writerow([t.number, t.state.name.lower(), _number(value), _number(attrs.get("psnr")),
                         attrs.get("steps", ""), _number(attrs.get("seconds")),
                         *(_number(settings.get(key)) for key in keys), note])
    return out.getvalue()


def _number(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return repr(value) if isinstance(value, float) else str(value)


def write_progress(study, space: Space, objective: str, out: Path) -> None:
    """trials.csv, best.toml and the charts of history and curves, as the study stands."""
    atomic_write_text(out / TRIALS_CSV, trials_table(study, space))
    best = best_trial(study)
    if best is not None:
        atomic_write_text(out / BEST_TOML, best_toml(best, objective, len(study.trials)))
    _write_charts(study, objective, out, best)


def best_toml(trial, objective: str, trials: int) -> str:
    settings = ", ".join(f"{key} = {value:.4g}" for key, value in trial.user_attrs.get("settings", {}).items())
    head = (f"# The best of {trials} trials of inr tune (trial {trial.number}, {OBJECTIVE_WHAT[objective]} "
            f"{trial.value:.6g}): {settings}.\n")
    return head + to_toml(from_json(trial.user_attrs["config"]))


def _write_charts(study, objective: str, out: Path, best) -> None:
    trials = study.get_trials(deepcopy=False)
    maximize = study.direction.name == "MAXIMIZE"
    complete = [(t.number, t.value) for t in trials if t.state.name == "COMPLETE"]
    pruned = [t.number for t in trials if t.state.name == "PRUNED" and not t.user_attrs.get("rejected")]
    curves = [(t.number, t.state.name.lower(), sorted(t.intermediate_values.items())) for t in trials
              if t.intermediate_values and t.state.name in ("COMPLETE", "PRUNED")]
    try:
        if complete or pruned:
            atomic_write_text(out / HISTORY_SVG, history_svg(complete, pruned, maximize, OBJECTIVE_WHAT[objective]))
        if curves:
            atomic_write_text(out / CURVES_SVG, curves_svg(curves, best.number if best else None,
                                                           READING_WHAT[objective]))
    except OSError as exc:  # the charts are a convenience: a failure only warns
        notice(f"could not write the study's charts in {out}: {exc}")


def write_importances(optuna, study, out: Path) -> bool:
    """importances.svg, where the finished trials say something (two or more, differing)."""
    if sum(t.state.name == "COMPLETE" for t in study.get_trials(deepcopy=False)) < 3:
        return False
    try:
        evaluator = optuna.importance.PedAnovaImportanceEvaluator()
        importances = optuna.importance.get_param_importances(study, evaluator=evaluator)
    except (ValueError, RuntimeError, ZeroDivisionError, FloatingPointError) as exc:
        notice(f"no importances.svg: {exc}")
        return False
    if not importances:
        return False
    atomic_write_text(out / IMPORTANCES_SVG, importances_svg(importances))
    return True


def write_best_png(renders: list[np.ndarray], sample: Sample, out: Path) -> None:
    """The sample's first images, each beside the best trial's render of it and their error."""
    rows = [side_by_side(render, image.values, psnr=psnr(render, image.values)).values
            for render, image in zip(renders, sample.images)]
    if not rows:
        return
    gap = np.ones((4, rows[0].shape[1], 3), np.float32)
    canvas = np.concatenate([part for row in rows for part in (row, gap)][:-1], axis=0)
    try:
        save_image(PixelImage(canvas, ("r", "g", "b")), out / BEST_PNG)
    except (InrError, OSError) as exc:
        notice(f"could not write {out / BEST_PNG}: {exc}")
