"""The Python API's boundary, walked: every public function and method of inr_cli (enumerated from
inr_cli.__all__ and the classes it hands out, so a new one fails here until it has a baseline) is
called with each of its arguments replaced in turn by a hostile value. It either works or raises an
InrError of one line, which is also the built-in error Python code catches for it (arguments.py);
never NumPy's words, a bare TypeError, an IndexError from deep inside."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import inr_cli
from inr_cli.api import TrainedNetwork, TrainedSet
from inr_cli.errors import ArgumentTypeError, IndexOutOfRange, InrError, NoSuchName
from inr_cli.weights_data import WeightsView
from tests.test_output_policy import make_images

HOSTILE = [None, 123, -1, 0, 1.5, float("nan"), True, "2", "", [], ["a"], object(), np.zeros((2, 3))]
TINY = {"steps": 1, "hidden": 8, "layers": 1, "device": "cpu"}
fresh = itertools.count()


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("api")
    make_images(base / "imgs" / "a", 2)
    make_images(base / "imgs" / "b", 2, first=2)
    make_images(base / "more", 2, first=4)
    nets = inr_cli.fit_many(base / "imgs", base / "set", quiet=True, **TINY)
    inr_cli.fit_many(base / "more", base / "set2", quiet=True, **TINY)
    return {"base": base, "set": nets, "net": nets[0], "view": nets.view()}


def baselines(made: dict) -> dict:
    """Valid arguments for every public callable, by its name (a fresh output each call)."""
    base, nets = made["base"], made["set"]
    out = base / f"out{next(fresh)}"
    coords = np.zeros((3, 2), np.float32)
    return {
        "load": {"path": base / "set"},
        "fit": {"image": np.full((4, 5, 3), 0.5), "run_dir": out, "quiet": True, **TINY},
        "fit_many": {"folder": base / "more", "out": out, "quiet": True, **TINY},
        "join": {"first": base / "set", "second": base / "set2", "out": out},
        "TrainedNetwork": {"spec": nets.spec, "params": nets.weights[0], "channels": nets.channels, "width": 8,
                           "height": 8},
        "TrainedNetwork.__call__": {"coords": coords},
        "TrainedNetwork.render": {"size": 16},
        "TrainedNetwork.write_tiles": {"path": base / f"tiles{next(fresh)}.tif", "size": 16},
        "TrainedNetwork.to_torch": {}, "TrainedNetwork.to_jax": {},
        "TrainedSet": {"folder": base / "set"},
        "TrainedSet.__getitem__": {"key": 0},
        "TrainedSet.__call__": {"coords": coords},
        "TrainedSet.view": {"classes": ["a", "b"]},
        "TrainedSet.networks": {},
        "TrainedSet.split": {"test": 0.5},
        "TrainedSet.batches": {"batch_size": 2},
        "TrainedSet.to_torch": {}, "TrainedSet.to_jax": {}, "TrainedSet.to_torch_dataset": {},
        "WeightsView.split": {"test": 0.5},
        "WeightsView.statistics": {},
        "WeightsView.standardized": {"mean": np.zeros(nets.spec.parameter_count()),
                                     "std": np.ones(nets.spec.parameter_count())},
        "WeightsView.order": {},
        "WeightsView.batches": {"batch_size": 2},
        "WeightsView.to_torch_dataset": {},
    }


def public(made: dict) -> dict:
    """Every public callable of the API, by name: inr_cli's functions and classes, and the methods of
    the objects they hand out (a network, a set, a view)."""
    found = {}
    for name in inr_cli.__all__:
        thing = getattr(inr_cli, name)
        if inspect.isfunction(thing) or name in ("TrainedNetwork", "TrainedSet"):
            found[name] = thing
    for owner, instance in ((TrainedNetwork, made["net"]), (TrainedSet, made["set"]), (WeightsView, made["view"])):
        for name, _ in inspect.getmembers(type(instance), inspect.isfunction):
            if not name.startswith("_") or name in ("__getitem__", "__call__"):
                found[f"{owner.__name__}.{name}"] = getattr(instance, name)
    return found


def test_every_public_function_takes_only_what_it_checks(made, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a hostile value taken as a path is one here
    calls = public(made)
    missing = sorted(set(calls) - set(baselines(made)))
    assert not missing, f"public API with no baseline here: {missing}"
    for name, function in calls.items():
        parameters = [p for p in inspect.signature(function).parameters.values()
                      if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
        for parameter, value in itertools.product(parameters, HOSTILE):
            if value is parameter.default or (parameter.annotation in ("bool", bool) and isinstance(value, bool)):
                continue
            arguments = {**baselines(made)[name], parameter.name: value}
            try:
                result = function(**arguments)
                if isinstance(result, Iterator):
                    next(result, None)
            except InrError as exc:
                assert "\n" not in str(exc) and str(exc), (name, parameter.name, value, str(exc))
            except Exception as exc:  # noqa: BLE001 - what the test is for
                pytest.fail(f"{name}({parameter.name}={value!r:.40}) raised {type(exc).__name__}: {exc}")


def test_the_built_in_error_a_python_user_catches():
    with pytest.raises(TypeError):
        inr_cli.load(None)
    with pytest.raises(ArgumentTypeError):
        inr_cli.load(123)
    assert issubclass(IndexOutOfRange, IndexError) and issubclass(NoSuchName, KeyError)
    assert str(NoSuchName("no image named 'x'")) == "no image named 'x'"  # not KeyError's quoted text


def test_an_index_a_name_and_classes_as_a_python_user_gives_them(made):
    nets = made["set"]
    with pytest.raises(IndexError, match="network 4 is out of range: there are 4"):
        nets[4]
    with pytest.raises(KeyError, match="no image named 'nope.png'"):
        nets["nope.png"]
    with pytest.raises(TypeError, match="classes is a list"):
        nets.view(classes="ab")  # one string is not the classes a and b
    with pytest.raises(ValueError, match=r"mean of shape \[3\]"):
        nets.view().standardized(np.zeros(3), np.ones(3))
    with pytest.raises(TypeError, match="mean is an array of numbers, got NoneType"):
        nets.view().standardized(None, None)
    with pytest.raises(TypeError, match="batch_size is a whole number"):
        nets.batches("2")  # said when called, not at the first batch
    assert Path(made["base"] / "set").is_dir()


def test_a_setting_or_size_the_command_refuses_is_a_value_error(made, tmp_path):
    """What the command checks deeper than the argument's type (a bound, a choice, an image's values, a
    canvas) reaches Python as the ValueError it catches, with the command's one line; an unknown
    keyword as the TypeError Python raises for one. Nothing is left behind."""
    base, net = made["base"], made["net"]
    refused = [
        (lambda: inr_cli.fit(np.full((4, 5, 3), 0.5), run_dir=tmp_path / "a", quiet=True, **{**TINY, "steps": -1}),
         ValueError, "must be positive, got -1"),
        (lambda: inr_cli.fit(np.full((4, 5, 3), 0.5), run_dir=tmp_path / "b", quiet=True, lr=-1.0, **TINY),
         ValueError, "must be positive"),
        (lambda: inr_cli.fit(np.full((4, 5, 3), 0.5), run_dir=tmp_path / "c", quiet=True, model="xx", **TINY),
         ValueError, "model 'xx' is not one of"),
        (lambda: inr_cli.fit(np.full((4, 5, 3), 200.0), run_dir=tmp_path / "d", quiet=True, **TINY),
         ValueError, "must be in [0, 1]"),
        (lambda: inr_cli.fit(np.full((4, 5, 3), 0.5), run_dir=tmp_path / "e", quiet=True, stepz=3, **TINY),
         TypeError, "did you mean steps="),
        (lambda: inr_cli.fit_many(base / "more", tmp_path / "f", quiet=True, **{**TINY, "steps": -2}),
         ValueError, "must be positive, got -2"),
        (lambda: net.render(size=0), ValueError, "size must be a positive number of pixels, got 0"),
        (lambda: net.write_tiles(tmp_path / "g.tif", height=-3), ValueError, "height must be a positive number"),
    ]
    for call, kind, message in refused:
        with pytest.raises(kind) as caught:
            call()
        assert isinstance(caught.value, InrError) and message in str(caught.value), str(caught.value)
    assert not list(tmp_path.iterdir())


def test_running_out_of_memory_in_a_fit_is_an_inr_error_that_is_a_memory_error():
    """NumPy's MemoryError inside fit, fit_many or meta-learning reaches Python as OutOfMemory: an
    InrError with the command's one line, and the MemoryError a Python user catches."""
    from inr_cli.api import _run_errors_for_python
    from inr_cli.errors import OutOfMemory

    with pytest.raises(OutOfMemory) as caught:
        with _run_errors_for_python():
            np.empty(1 << 62, np.uint8)  # more than any machine: NumPy's own MemoryError
    assert isinstance(caught.value, InrError) and isinstance(caught.value, MemoryError)
    assert "\n" not in str(caught.value) and "--hash-levels" in str(caught.value)
