"""pytest-xdist's --dist loadgroup (pyproject.toml's addopts), mended where a worker crashes: a test
that takes its worker down (a native crash, a kill) is reported failed and the run goes on to its
end. xdist's own scheduler (3.8) puts the dead worker's whole workload back on the queue, its finished
tests and the crashed one included, and gives the replacement a single test, which a worker does not
start until it holds the next one: the run waited for ever (pytest-xdist issues 1323, 1327, 1378).
tests/conftest.py uses it; `-p tests.xdist_scheduling` uses it anywhere."""

from __future__ import annotations

import pytest


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class LoadGroupThroughACrash(LoadGroupScheduling):
        def remove_node(self, node):
            """The test the worker was running when it went down (None when it had none left):
            marked done (xdist reports it failed), and what the worker had not run is queued again."""
            workload = self.assigned_work.pop(node)
            unfinished = {scope: unit for scope, unit in workload.items() if not all(unit.values())}
            if not unfinished:
                return None
            crashed = next(nodeid for unit in unfinished.values() for nodeid, done in unit.items() if not done)
            for unit in unfinished.values():
                if crashed in unit:
                    unit[crashed] = True
            self.workqueue.update({scope: unit for scope, unit in unfinished.items() if not all(unit.values())})
            for other in self.assigned_work:
                self._reschedule(other)
            return crashed

        def _reschedule(self, node):
            # A worker starts a test once it holds the next one or its end: give it two, or its end
            super()._reschedule(node)
            while node in self.assigned_work and not node.shutting_down and \
                    self._pending_of(self.assigned_work[node]) < 2:
                super()._reschedule(node)

    return LoadGroupThroughACrash(config, log)
