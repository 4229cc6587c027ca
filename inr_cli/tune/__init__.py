"""`inr tune`: a study of the fitting settings on Optuna. space.py: what is searched; sample.py: the
images a trial fits; trial.py: one trial; search.py: the sampler and the pruner; storage.py: the
study's journal in the output folder; study.py: starting or resuming a study; session.py: running
its trials here, on_ray.py: as Ray tasks; outputs.py and charts.py: what it leaves for a person.

Optuna is an extra (inr's tune extra): only these modules import it, and only when the
command runs; require_optuna says what to install when it is missing.
"""

from __future__ import annotations

from inr_cli.extras import require


def require_optuna():
    """The optuna module, or one line naming the extra that brings it."""
    return require("optuna", "inr tune", "tune")
