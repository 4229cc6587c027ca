"""The Python API's boundary, walked: every public function and method of inr_cli (enumerated from
inr_cli.__all__ and the classes it hands out, so a new one fails here until it has a baseline) is
called with each of its arguments replaced in turn by a hostile value. It either works or raises an
InrError of one line, which is also the built-in error Python code catches for it (arguments.py);
never NumPy's words, a bare TypeError, an IndexError from deep inside."""

from __future__ import annotations

import errno
import inspect
import itertools
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import inr_cli
from inr_cli.api import TrainedNetwork, TrainedSet
from inr_cli.errors import ArgumentTypeError, FileError, IndexOutOfRange, InrError, NoSuchName, UsageError
from inr_cli.weights_data import WeightsView
from tests.test_output_policy import make_images

HOSTILE = [None, 123, -1, 0, 1.5, float("nan"), True, "2", "", [], ["a"], object(), np.zeros((2, 3)),
           "photo.png",  # an image where a run or a set goes (written where the walk runs)
           "a\0b.tif"]  # what no file can be named
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
    (tmp_path / "photo.png").write_bytes((made["base"] / "imgs" / "a" / "i0.png").read_bytes())
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
                assert not isinstance(exc, UsageError) or isinstance(exc, (TypeError, ValueError, LookupError)), \
                    (name, parameter.name, value, f"a bare {type(exc).__name__}: {exc}")
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
        (lambda: net.render(size=8, width=5), ValueError, "give either size or width/height, not both"),
        (lambda: net.write_tiles(tmp_path / "h.tif", size=8, height=5), ValueError, "give either size or width/"),
    ]
    for call, kind, message in refused:
        with pytest.raises(kind) as caught:
            call()
        assert isinstance(caught.value, InrError) and message in str(caught.value), str(caught.value)
    assert not list(tmp_path.iterdir())


def test_a_path_the_system_refuses_is_the_commands_one_line_and_an_os_error(made, tmp_path):
    """A name longer than the system takes, wherever a path goes (read or written), is one line naming
    it: where no reader names it, the line the commands print for it, "NAME: File name too long", an
    InrError that is the OSError Python code catches; never the system's bare OSError. Nothing is left
    behind."""
    base, net = made["base"], made["net"]
    long = tmp_path / ("x" * 300)
    calls = {"load": lambda: inr_cli.load(long), "TrainedSet": lambda: TrainedSet(long),
             "join": lambda: inr_cli.join(base / "set", long, tmp_path / "joined"),
             "fit run_dir": lambda: inr_cli.fit(np.full((4, 5, 3), 0.5), run_dir=long, quiet=True, **TINY),
             "fit_many folder": lambda: inr_cli.fit_many(long, tmp_path / "out", quiet=True, **TINY),
             "fit_many out": lambda: inr_cli.fit_many(base / "more", long, quiet=True, **TINY),
             "write_tiles": lambda: net.write_tiles(f"{long}.tif", size=8)}
    for what, call in calls.items():
        with pytest.raises(InrError) as caught:
            call()
        said = str(caught.value)
        assert "\n" not in said and "x" * 300 in said and "File name too long" in said, (what, said)
        if isinstance(caught.value, FileError):
            assert caught.value.errno == errno.ENAMETOOLONG and said.startswith(f"{long}"), (what, said)
    with pytest.raises(OSError) as caught:
        inr_cli.load(long)
    assert isinstance(caught.value, FileError) and str(caught.value) == f"{long}: File name too long"
    assert not list(tmp_path.iterdir())


def test_a_start_holding_nul_is_named_as_the_other_paths_are_never_shown_raw(made, tmp_path):
    """init= (fit, fit_many) and settings['training.init'] name a start file as the other path
    arguments do: a NUL is one ValueError showing it escaped, before anything is written."""
    base = made["base"]
    calls = {"fit": lambda **start: inr_cli.fit(np.full((4, 5, 3), 0.5), run_dir=tmp_path / "run", quiet=True,
                                                **TINY, **start),
             "fit_many": lambda **start: inr_cli.fit_many(base / "more", tmp_path / "out", quiet=True, **TINY,
                                                          **start)}
    for what, call in calls.items():
        for start, name in (({"init": "a\0b.safetensors"}, "init"),
                            ({"settings": {"training.init": "a\0b.safetensors"}}, "settings['training.init']")):
            with pytest.raises(ValueError) as caught:
                call(**start)
            said = str(caught.value)
            assert isinstance(caught.value, InrError) and "\0" not in said, (what, said)
            assert said == f"{name} holds a NUL character, which no file name can: got 'a\\x00b.safetensors'", \
                (what, said)
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


def test_a_usage_error_from_beneath_is_a_value_error(made, tmp_path):
    """What a check the commands share refuses (a file that is not a run, an unknown configuration
    key, a setting's bound) reaches Python as the ValueError a bad argument is, still an InrError with
    the command's line; nothing is left behind."""
    image = made["base"] / "imgs" / "a" / "i0.png"
    refused = [
        (lambda: inr_cli.load(image), "is an image, not a trained network"),
        (lambda: inr_cli.fit(image, settings={"nosuch.key": 1}, run_dir=tmp_path / "a", quiet=True, **TINY),
         "settings['nosuch.key']: unknown key 'nosuch.key'"),
        (lambda: inr_cli.fit(np.full((4, 5, 3), 0.5), settings={"training.checkpoint_every": 1, "network.omega": 1},
                             run_dir=tmp_path / "b", quiet=True, **TINY), "unknown key 'network.omega'"),
        (lambda: inr_cli.fit_many(made["base"] / "more", tmp_path / "c", settings={"training.checkpoint_every": 5},
                                  quiet=True, **TINY), "training.checkpoint_every is not a setting of fit-many"),
        (lambda: inr_cli.fit(image, run_dir=tmp_path / "d", quiet=True, **{**TINY, "hidden": 10**9}),
         "must be at most"),
    ]
    for call, message in refused:
        with pytest.raises(ValueError) as caught:
            call()
        assert isinstance(caught.value, InrError) and message in str(caught.value), str(caught.value)
    assert not list(tmp_path.iterdir())


def test_a_byte_budget_is_a_number_of_bytes_or_its_text(made, tmp_path):
    """max_bytes= takes a whole number of bytes, as --max-bytes 300000 does, and fits the network the
    text fits; a bool, a float, zero or less is refused in one line naming max_bytes=."""
    array = np.full((4, 5, 3), 0.5)
    fits = {"array": array, "quiet": True, "steps": 1, "device": "cpu"}
    by_text = inr_cli.fit(fits.pop("array"), run_dir=tmp_path / "text", max_bytes="3000", **fits)
    for given in (3000, np.int64(3000)):
        by_number = inr_cli.fit(array, run_dir=tmp_path / f"n{type(given).__name__}", max_bytes=given, **fits)
        assert by_number.spec == by_text.spec and np.array_equal(by_number.params, by_text.params)
        assert 'max_bytes = "3000"' in (by_number.run_dir / "config.toml").read_text()
    (tmp_path / "budget.toml").write_text("[network]\nmax_bytes = 3000\n")
    by_file = inr_cli.fit(array, run_dir=tmp_path / "file", config=tmp_path / "budget.toml", **fits)
    assert by_file.spec == by_text.spec and np.array_equal(by_file.params, by_text.params)
    for bad, kind in ((True, TypeError), (1.5e5, TypeError), (0, ValueError), (-5, ValueError),
                      ("500kk", ValueError)):
        with pytest.raises(kind) as caught:
            inr_cli.fit(array, run_dir=tmp_path / "bad", max_bytes=bad, **fits)
        assert isinstance(caught.value, InrError)
        assert str(caught.value) == (f"max_bytes= {bad!r} is not a byte budget: write it as 500k, 1.5M, 2MiB, "
                                     f"300000 or image")
    assert not (tmp_path / "bad").exists()


def test_numpy_scalars_are_taken_where_python_numbers_are(made, tmp_path):
    """np.int64(8) where an int goes, np.float32(1e-3) where a float goes: the fit of the Python numbers,
    bit for bit. A NumPy float where an integer goes, or a NumPy bool, stays refused."""
    array = np.full((4, 5, 3), 0.5)
    plain = inr_cli.fit(array, run_dir=tmp_path / "plain", quiet=True, hidden=8, layers=1, steps=3, lr=1e-3,
                        device="cpu", settings={"optimizer.beta2": 0.95})
    numpy = inr_cli.fit(array, run_dir=tmp_path / "numpy", quiet=True, hidden=np.int64(8), layers=np.int32(1),
                        steps=np.uint8(3), lr=np.float64(1e-3), device="cpu",
                        settings={"optimizer.beta2": np.float64(0.95)})
    assert numpy.spec == plain.spec and np.array_equal(numpy.params, plain.params)
    assert inr_cli.fit(array, run_dir=tmp_path / "f32", quiet=True, lr=np.float32(1e-3), **TINY).spec == \
        inr_cli.fit(array, run_dir=tmp_path / "py", quiet=True, lr=float(np.float32(1e-3)), **TINY).spec
    net = made["net"]
    assert net.render(size=np.int64(8), depth=np.int64(16)).dtype == np.uint16
    for bad in ({"hidden": np.float64(8)}, {"steps": np.bool_(True)}, {"lr": np.bool_(True)}):
        with pytest.raises(TypeError, match="must be an integer|must be a number") as caught:
            inr_cli.fit(array, run_dir=tmp_path / "bad", quiet=True, **{**TINY, **bad})
        assert isinstance(caught.value, InrError)
    with pytest.raises(ValueError, match="depth"):
        net.render(depth=np.float64(16))


@pytest.mark.parametrize("array, says", [
    (np.array([[None, None]]), "of dtype object, holds NoneType None, which is not a number"),
    (np.array([[0.5, None]]), "of dtype object, holds NoneType None, which is not a number"),
    (np.zeros((2, 2), np.complex64), "got one of dtype complex64: complex values are not taken"),
    (np.array([["0.5", "0.5"]]), "got one of dtype <U3"),
    (np.zeros((2, 2), bool), "got one of dtype bool"),
    ([[0.5, 0.5], [0.5]], "is an array of numbers, got list"),
])
def test_an_array_of_what_are_not_real_numbers_is_refused_by_its_dtype(made, array, says, tmp_path, monkeypatch):
    """Coordinates, parameters, statistics and an image to fit: None is not NaN, a complex value is
    not its real part (NumPy only warns), text is not the number it spells. A TypeError naming the
    dtype, never a NumPy warning; an object array of numbers is the numbers."""
    monkeypatch.chdir(tmp_path)  # where a fit would write its run
    net, nets = made["net"], made["set"]
    width = nets.spec.parameter_count()
    calls = {"coords": lambda: net(array), "set coords": lambda: nets(array),
             "params": lambda: TrainedNetwork(nets.spec, array, nets.channels, 8, 8),  # its dtype before its shape
             "mean": lambda: nets.view().standardized(array, np.ones(width)),
             "image": lambda: inr_cli.fit(array, quiet=True, **TINY)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's ComplexWarning among them
        for what, call in calls.items():
            with pytest.raises(TypeError) as caught:
                call()
            assert isinstance(caught.value, InrError) and says in str(caught.value), (what, str(caught.value))
    assert net(np.array([[0.5, -0.5]], dtype=object)).shape == (1, len(net.channels))


@pytest.mark.parametrize("tiny", [1e-45, 2.9e-39])
def test_a_std_too_small_to_divide_by_in_float32_is_refused_without_a_warning(made, tiny):
    """standardized() with a positive std whose reciprocal float32 cannot hold: one ValueError naming
    the value and the parameter, never NumPy's overflow warning and infinite weights handed out."""
    view = made["set"].view()
    mean, std = view.statistics()
    std = std.astype(np.float64)
    std[3] = tiny
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's RuntimeWarning: overflow encountered in divide
        with pytest.raises(ValueError) as caught:
            view.standardized(mean, std)
        assert isinstance(caught.value, InrError)
        assert f"std holds {tiny:g} (parameter 3), too small to divide by in float32" in str(caught.value)
        std[3] = 3e-39  # the least it takes
        assert np.isfinite(view.standardized(mean, std).weights).all()


def test_standardized_weights_beyond_float32_are_refused_where_they_are_made(made):
    """A small std that float32 divides by, against a mean far from the weights: (w - mean) / std
    overflows. One ValueError naming the parameter and its image when the weights are taken, never
    NumPy's warning and infinite weights handed out."""
    view = made["set"].view()
    mean, std = view.statistics()
    mean, std = mean.astype(np.float64), std.astype(np.float64)
    mean[5], std[5] = -10.0, 1e-38  # |w - mean| / std near 1e39
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        standardized = view.standardized(mean, std)  # accepted: 1 / std is finite in float32
        with pytest.raises(ValueError) as caught:
            _ = standardized.weights
        assert isinstance(caught.value, InrError)
        assert "standardized weights beyond float32's range: parameter 5 of " in str(caught.value)
        assert "(mean -10, std 1e-38)" in str(caught.value)

def test_an_array_beyond_float32_is_refused_in_its_own_type_without_a_warning(made):
    """Coordinates, parameters, statistics and latents are float32: a float64 beyond its range is one
    ValueError naming the argument and the number, never NumPy's overflow warning and an infinity
    (or NaN) the check after the cast would call the user's; within its range it is taken."""
    net, nets = made["net"], made["set"]
    width = nets.spec.parameter_count()
    beyond = np.full((3, 2), 0.5)
    beyond[1, 0] = -1e300
    calls = {"coords": lambda array: net(array), "set coords": lambda array: nets(array),
             "params": lambda array: TrainedNetwork(nets.spec, np.resize(array, width), nets.channels, 8, 8),
             "mean": lambda array: nets.view().standardized(np.resize(array, width), np.ones(width))}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's RuntimeWarning: overflow encountered in cast
        for what, call in calls.items():
            with pytest.raises(ValueError) as caught:
                call(beyond)
            assert isinstance(caught.value, InrError), (what, str(caught.value))
            assert "holds -1e+300, beyond float32's range" in str(caught.value), (what, str(caught.value))
        assert np.isfinite(net(np.full((3, 2), 1e30))).all()  # far from the pixels, still a float32
