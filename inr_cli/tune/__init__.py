"""`inr tune`: a study of the fitting settings on Optuna (space.py what is searched, sample.py the
images a trial fits, trial.py one trial, study.py the study and its storage in the output folder,
on_ray.py trials as Ray tasks, outputs.py and charts.py what the study leaves for a person).

Optuna is an extra (`pip install 'inr[tune]'`): only these modules import it, and only when the
command runs; require_optuna says what to install when it is missing.
"""

from __future__ import annotations

from inr_cli.errors import InrError

EXTRA = "pip install 'inr[tune]'"


def require_optuna():
    """The optuna module, or one line naming the extra that brings it."""
    try:
        import optuna
    except ImportError:
        raise InrError(f"inr tune needs Optuna: {EXTRA}") from None
    return optuna
