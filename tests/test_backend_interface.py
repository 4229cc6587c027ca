"""The parts built from their names: every engine implements backend.Backend as it is stated, and the
optimizer, encoding and model factories offer what the settings offer, refusing anything else."""

from __future__ import annotations

import inspect
from abc import ABCMeta

import pytest

from inr_cli.backends.cpu_backend import CpuBackend
from inr_cli.backends.cuda_backend import CudaBackend
from inr_cli.backends.host_memory import HostMemory
from inr_cli.backends.kernel_backend import KernelBackend
from inr_cli.backends.launch import ACTIVATION_CODES
from inr_cli.backends.numpy_backend import NumpyBackend
from inr_cli.config import from_values, with_values
from inr_cli.core.backend import Backend
from inr_cli.core.encodings import ENCODING_CLASSES, create_encoding
from inr_cli.core.models import ACTIVATIONS, MODEL_CLASSES, create_model
from inr_cli.core.network import NetworkSpec
from inr_cli.core.optimizers import OPTIMIZER_CLASSES, create_optimizer
from inr_cli.settings import DEFAULTS, ENCODINGS, MODELS, OPTIMIZERS
from tests.emulation.emulated_backend import EmulatedBackend

ENGINES = [NumpyBackend, CpuBackend, CudaBackend, EmulatedBackend]
MEMBERS = sorted(name for name, member in vars(Backend).items() if inspect.isfunction(member))


def stated(function) -> list[tuple]:
    """A signature as (name, kind, default) of each parameter: annotations are the interface's to
    state, not every engine's to repeat."""
    parameters = list(inspect.signature(function).parameters.values())
    return [(p.name, p.kind, p.default) for p in parameters]


def implementation(engine: type, name: str):
    """engine's member `name` as a plain function of its arguments without `self`, whether a method or
    a bound staticmethod (the reference's operations are numpy_ops' functions)."""
    for cls in engine.__mro__:
        if name in vars(cls):
            member = vars(cls)[name]
            if isinstance(member, staticmethod):
                return cls, stated(member.__func__)
            return cls, stated(member)[1:]
    raise AssertionError(f"{engine.__name__} has no {name}")


@pytest.mark.parametrize("engine", ENGINES, ids=lambda engine: engine.__name__)
def test_every_engine_implements_every_operation_as_stated(engine):
    assert issubclass(engine, Backend) and not engine.__abstractmethods__
    assert isinstance(engine.name, str)
    for name in MEMBERS:
        owner, signature = implementation(engine, name)
        assert owner is Backend or not getattr(vars(owner)[name], "__isabstractmethod__", False), (engine, name)
        assert signature == stated(getattr(Backend, name))[1:], f"{engine.__name__}.{name}: {signature}"


def test_the_reference_and_the_cpu_engine_are_siblings():
    assert not issubclass(CpuBackend, NumpyBackend) and not issubclass(NumpyBackend, CpuBackend)
    assert issubclass(CpuBackend, HostMemory) and issubclass(NumpyBackend, HostMemory)


@pytest.mark.parametrize("missing", sorted(Backend.__abstractmethods__))
def test_an_engine_missing_an_operation_cannot_be_made(missing):
    members = {name: inspect.getattr_static(NumpyBackend, name) for name in Backend.__abstractmethods__}
    del members[missing]
    partial = ABCMeta("Partial", (Backend,), members)
    with pytest.raises(TypeError, match=missing):
        partial()


def test_a_kernel_engine_needs_memory_and_a_launcher():
    with pytest.raises(TypeError, match="launch"):
        KernelBackend()


def configuration(**values):
    return from_values({**DEFAULTS, **values})


def spec_of(model="siren", encoding="none", **values) -> NetworkSpec:
    config = with_values(configuration(), {"network.model": model, "encoding.name": encoding,
                                           "network.omega0": 30.0, "encoding.sigma": 5.0, "encoding.features": 3,
                                           "encoding.max_resolution": 20, "encoding.levels": 4,
                                           "encoding.log2_table_size": 10, "network.hidden": 6, "network.layers": 2,
                                           **values})
    return NetworkSpec.from_config(config, 3)


def test_the_factories_offer_what_the_settings_offer():
    assert list(OPTIMIZER_CLASSES) == list(OPTIMIZERS)
    assert list(ENCODING_CLASSES) == list(ENCODINGS)
    assert list(MODEL_CLASSES) == list(MODELS)
    for name in OPTIMIZERS:
        assert create_optimizer(configuration(**{"optimizer.name": name}).optimizer).name == name
    for name in ENCODINGS:
        encoding = create_encoding(spec_of(encoding=name))
        assert encoding.name == name and spec_of(encoding=name).encoded_features == encoding.features
    for name in MODELS:
        model = create_model(spec_of(model=name))
        assert model.name == name
        # Every activation a model uses is one the backends and the kernels know.
        assert {model.hidden_activation, model.output_activation} <= set(ACTIVATIONS)
    assert set(ACTIVATIONS) == set(ACTIVATION_CODES)


def test_an_unknown_name_is_refused_with_the_choices():
    settings = configuration().optimizer
    with pytest.raises(ValueError, match="optimizer 'adamw' is not one of: adam, sgd"):
        create_optimizer(type(settings)(**{**vars(settings), "name": "adamw"}))
    spec = spec_of()
    with pytest.raises(ValueError, match="encoding 'hash' is not one of: none, fourier"):
        NetworkSpec.from_json(spec.to_json().replace('"none"', '"hash"'))
    with pytest.raises(ValueError, match="model 'gauss' is not one of: siren, sigmoid, relu"):
        NetworkSpec.from_json(spec.to_json().replace('"siren"', '"gauss"'))


def test_the_optimizers_call_their_operation_with_their_settings():
    calls = []

    class Recording:
        def __getattr__(self, name):
            return lambda *args: calls.append((name, args))

    adam = configuration(**{"optimizer.beta1": 0.8, "optimizer.beta2": 0.99, "optimizer.eps": 1e-6}).optimizer
    sgd = configuration(**{"optimizer.name": "sgd", "optimizer.momentum": 0.5}).optimizer
    params, grads, moment1, moment2, hyper = "params", "grads", "moment1", "moment2", "hyper"
    for settings in (adam, sgd):
        create_optimizer(settings).update(Recording(), params, grads, moment1, moment2, hyper)
    assert calls == [("adam_update", (params, grads, moment1, moment2, hyper, 0.8, 0.99, 1e-6)),
                     ("sgd_update", (params, grads, moment1, hyper, 0.5))]
