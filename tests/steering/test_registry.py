"""steering.registry: the one plugin registry type (lookup, did-you-mean, collisions by
origin, order, metadata, lazy modules) and the suite's registries being instances of it."""

from __future__ import annotations

import sys
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steering.registry import NameTaken, Registry, UnknownName, origin_of


def one() -> int:
    return 1


def other_one() -> int:
    return 1


def test_register_as_call_and_as_decorator_return_the_value():
    reg: Registry[object] = Registry("thing")
    assert reg.register("one", one) is one

    @reg.register("two")
    def two() -> int:
        return 2

    assert reg["one"] is one and reg["two"] is two and two() == 2
    assert "one" in reg and "three" not in reg and len(reg) == 2
    assert reg.get("three") is None and reg.get("three", 3) == 3
    assert dict(reg.items()) == {"one": one, "two": two}


def test_an_unknown_name_lists_the_known_ones_and_the_closest():
    reg: Registry[int] = Registry("decode policy")
    for name in ("reference", "cpu", "cuda"):
        reg.register(name, len(name))
    with pytest.raises(UnknownName) as info:
        reg["cdua"]
    message = str(info.value)
    assert message.startswith("unknown decode policy 'cdua' (did you mean 'cuda'?)")
    assert message.endswith("use one of 'cpu', 'cuda', 'reference'")
    # a mapping's KeyError, and the ValueError the suite's lookups always raised
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)
    assert "did you mean" not in str(reg.unknown("tpuxyz"))


def test_a_name_taken_twice_names_both_origins():
    reg: Registry[object] = Registry("direction source")
    reg.register("one", one)
    with pytest.raises(NameTaken) as info:
        reg.register("one", other_one)
    message = str(info.value)
    assert "direction source 'one' is already registered" in message
    assert f"{__name__}:one" in message and f"{__name__}:other_one" in message
    assert reg["one"] is one  # the first registration stays


def test_an_instance_s_origin_is_the_line_that_registered_it():
    reg: Registry[object] = Registry("rubric")
    reg.register("a", object())
    assert reg.origin("a").startswith(f"{__name__}:")
    assert reg.origin("a").rsplit(":", 1)[1].isdigit()
    with pytest.raises(NameTaken, match=f"already registered by {reg.origin('a')}"):
        reg.register("a", object())
    reg.register("b", object(), origin="configs:b")
    assert reg.origin("b") == "configs:b"


def test_the_same_object_or_a_reloaded_definition_may_register_again():
    reg: Registry[object] = Registry("thing")
    reg.register("one", one)
    reg.register("one", one)
    assert reg.names() == ["one"]
    # A module reloaded defines a new function with the same module:qualname.
    reloaded = types.FunctionType(one.__code__, one.__globals__, "one")
    reloaded.__qualname__ = one.__qualname__
    reg.register("one", reloaded)
    assert reg["one"] is reloaded and reg.origin("one") == origin_of(one)
    with pytest.raises(NameTaken, match="other metadata"):
        reg.register("one", reloaded, local=True)


def test_names_keep_registration_order():
    reg: Registry[int] = Registry("phase")
    for name in ("phase5", "calibration", "identify"):
        reg.register(name, 0)
    assert reg.names() == ["phase5", "calibration", "identify"] == list(reg)
    reg.pop("calibration")
    reg.register("calibration", 1)
    assert list(reg) == ["phase5", "identify", "calibration"]
    assert reg.pop("nope", None) is None
    with pytest.raises(UnknownName):
        reg.pop("nope")


def test_metadata_is_kept_per_entry_and_read_only():
    reg: Registry[object] = Registry("judge provider")
    reg.register("local", one, local=True)
    reg.register("api")(other_one)
    assert reg.metadata("local") == {"local": True} and reg.metadata("api") == {}
    with pytest.raises(TypeError):
        reg.metadata("local")["local"] = False  # type: ignore[index]
    entry = reg.entry("local")
    assert (entry.name, entry.value, entry.origin) == ("local", one, origin_of(one))


def test_a_lazy_name_imports_its_module_on_first_lookup_only(monkeypatch):
    reg: Registry[object] = Registry("provider", lazy={"echo": "fake_echo_provider"})
    imported = []

    def import_module(name: str) -> None:
        imported.append(name)
        reg.register("echo", one)

    monkeypatch.setattr("steering.registry.importlib.import_module", import_module)
    assert "echo" in reg and reg.names() == ["echo"] and imported == []
    assert reg["echo"] is one and reg["echo"] is one
    assert imported == ["fake_echo_provider"]
    assert "fake_echo_provider" not in sys.modules


names = st.lists(st.text("abcdefgh", min_size=1, max_size=6), unique=True, max_size=12)


@given(names, st.text("abcdefghij", min_size=1, max_size=7))
def test_any_registry_looks_up_what_it_registered_in_order(registered, probe):
    reg: Registry[int] = Registry("thing")
    for i, name in enumerate(registered):
        assert reg.register(name, i) == i
    assert reg.names() == registered and len(reg) == len(registered)
    assert all(reg[name] == i for i, name in enumerate(registered))
    if probe in registered:
        assert reg[probe] == registered.index(probe)
    else:
        with pytest.raises(UnknownName) as info:
            reg[probe]
        assert repr(probe) in str(info.value)
        assert all(repr(name) in str(info.value) for name in registered)


# ---------------------------------------------------------------- the suite's registries


def test_the_suite_s_registries_are_registries():
    from experiments.config import PHASE_MODELS, Phase5Config
    from experiments.identify.stages.manipulations import MANIPULATIONS
    from judges.base import RUBRICS
    from judges.registry import _REGISTRY as JUDGE_PROVIDERS
    from steering.directions import _SOURCES
    from steering.platform import PLATFORMS
    from steering.policies import POLICIES

    for reg in (PHASE_MODELS, MANIPULATIONS, RUBRICS, JUDGE_PROVIDERS, _SOURCES, PLATFORMS):
        assert isinstance(reg, Registry)
    assert isinstance(POLICIES, Registry)
    assert list(PHASE_MODELS) == ["phase5", "calibration", "identify"]
    assert PHASE_MODELS["phase5"] is Phase5Config
    assert MANIPULATIONS.names()[:2] == ["rotation", "noise"]  # the grid's order
    assert MANIPULATIONS.origin("noise") == "experiments.identify.stages.manipulations:_label_noise"
    assert list(RUBRICS) == ["relatedness", "axbench"]
    assert _SOURCES.origin("diffmean") == "steering.directions:diffmean"
    assert sorted(PLATFORMS) == ["cpu", "cuda"]
