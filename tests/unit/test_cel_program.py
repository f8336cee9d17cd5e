"""Compile once, evaluate many: program and activation caches, device conversion, threads, explain."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from dra_driver.quantity import Quantity
from dra_driver.tools.cel import (
    ActivationCache,
    CELRuntimeError,
    DeviceValueError,
    ProgramCache,
    RunnerKind,
    Semver,
    build_device_activation,
    compile_selector,
)
from dra_driver.tools.cel.explain import Outcome, explain

DRIVER = "gpu.migdra.io"
D = f"device.attributes['{DRIVER}']"


def device(name: str = "gpu-0", **attributes: Any) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": dict(attributes.items()),
        "capacity": {"memory": {"value": "10Gi"}},
    }


def test_program_cache_compiles_each_expression_once() -> None:
    cache = ProgramCache(maxsize=2)
    first = compile_selector("device.driver == 'a'", cache=cache)
    assert compile_selector("device.driver == 'a'", cache=cache) is first
    assert compile_selector("device.driver == 'a'", cache=cache, runner="interpreted") is not first
    compile_selector("device.driver == 'b'", cache=cache)
    assert len(cache) == 2
    assert compile_selector("device.driver == 'a'", cache=cache) is not first  # evicted, least recently used


def test_activation_is_built_once_per_device_and_reused() -> None:
    cache = ActivationCache()
    gpu = device(type={"string": "gpu"})
    a = compile_selector(f"{D}.type == 'gpu'")
    b = compile_selector("device.driver == 'gpu.migdra.io'")
    assert a.matches(gpu, driver=DRIVER, activations=cache)
    assert b.matches(gpu, driver=DRIVER, activations=cache)
    assert (cache.misses, cache.hits) == (1, 1)
    assert a.matches(dict(gpu), driver=DRIVER, activations=cache)  # an equal but distinct dict is a new device
    assert cache.misses == 2
    assert not b.matches(gpu, driver="other.example.com", activations=cache)  # the driver is part of the key
    assert cache.misses == 3


def test_explicit_activation_is_reusable_and_bound_to_its_driver() -> None:
    activation = build_device_activation(device(type={"string": "mig"}), DRIVER)
    program = compile_selector(f"{D}.type == 'mig'")
    assert program.matches(activation)
    assert program.matches(activation, driver=DRIVER)
    with pytest.raises(ValueError, match="built for driver"):
        program.matches(activation, driver="other.example.com")


def test_device_conversion() -> None:
    activation = build_device_activation(
        {
            "name": "d",
            "basic": {  # v1beta1 layout
                "attributes": {
                    "count": {"int": 3},
                    "ok": {"bool": True},
                    "v": {"version": "1.2.3"},
                    "other.example.com/x": {"string": "y"},
                },
                "capacity": {"memory": "1Gi", "cores": {"value": 4}},
                "allowMultipleAllocations": True,
            },
        },
        DRIVER,
    )
    value = activation.value
    assert value["driver"] == DRIVER
    assert value["allowMultipleAllocations"] is not None
    assert isinstance(value["attributes"][DRIVER]["v"], Semver)
    assert value["attributes"]["other.example.com"]["x"] == "y"
    assert value["capacity"][DRIVER]["memory"] == Quantity.parse("1024Mi")
    assert value["capacity"][DRIVER]["cores"] == Quantity.parse("4")
    assert len(value["attributes"]["nowhere.example.com"]) == 0  # unknown domain: empty map
    assert "nowhere.example.com" not in value["attributes"]


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        pytest.param({"a": {"int": 1, "string": "x"}}, "exactly one of", id="two-values"),
        pytest.param({"a": {}}, "exactly one of", id="no-value"),
        pytest.param({"a": {"version": "1.2"}}, "not a semantic version", id="bad-version"),
        pytest.param({"a": {"int": "1"}}, "wrong type", id="wrong-type"),
    ],
)
def test_malformed_devices_are_reported(attributes: dict[str, Any], message: str) -> None:
    program = compile_selector("device.driver == 'x'")
    with pytest.raises(DeviceValueError, match=message) as raised:
        program.matches({"name": "bad", "attributes": attributes}, driver=DRIVER, activations=ActivationCache())
    assert isinstance(raised.value, CELRuntimeError)
    assert raised.value.expression == "device.driver == 'x'"


def test_compiled_runner_is_thread_safe() -> None:
    """celpy's own CompiledRunner exec()s into shared module globals per call; ours must not race."""
    programs = {
        "mig": compile_selector(f"{D}.type == 'mig' && {D}.profile.startsWith('1g')"),
        "big": compile_selector(f"device.capacity['{DRIVER}'].memory.compareTo(quantity('20Gi')) >= 0"),
    }
    devices = [
        device(f"d{i}", type={"string": "mig"}, profile={"string": "1g.10gb" if i % 2 else "3g.40gb"})
        for i in range(50)
    ]
    for index, entry in enumerate(devices):
        entry["capacity"]["memory"]["value"] = "40Gi" if index % 3 == 0 else "10Gi"
    expected = {name: [p.matches(d, driver=DRIVER) for d in devices] for name, p in programs.items()}
    failures: list[str] = []

    def work() -> None:
        for _ in range(20):
            for name, program in programs.items():
                got = [program.matches(d, driver=DRIVER) for d in devices]
                if got != expected[name]:
                    failures.append(name)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert expected["mig"] == [bool(i % 2) for i in range(50)]


@pytest.mark.parametrize("runner", list(RunnerKind))
def test_explain_names_the_false_clause(runner: RunnerKind) -> None:
    program = compile_selector(
        f"device.driver == '{DRIVER}' && {D}.type == 'mig' && {D}.profile == '1g.10gb'", runner=runner
    )
    gpu = device(type={"string": "gpu"})
    explanation = explain(program, gpu, driver=DRIVER)
    assert explanation.outcome is Outcome.NO_MATCH
    assert explanation.reason == f"clause 2 of 3 is false: {D}.type == 'mig'"
    assert [c.outcome for c in explanation.clauses] == [Outcome.MATCH, Outcome.NO_MATCH, Outcome.ERROR]
    assert explanation.clauses[2].error == "no such key: profile"
    matched = explain(program, device(type={"string": "mig"}, profile={"string": "1g.10gb"}), driver=DRIVER)
    assert matched.outcome is Outcome.MATCH
    assert matched.reason is None


def test_explain_names_the_lookup_that_raised() -> None:
    program = compile_selector(f"{D}.type == 'mig' && {D}.profile == '1g.10gb'")
    explanation = explain(program, device(type={"string": "mig"}), driver=DRIVER)
    assert explanation.outcome is Outcome.ERROR
    assert explanation.reason == (f"no such key: profile from {D}.profile (in clause 2 of 2: {D}.profile == '1g.10gb')")


def test_explain_single_clause() -> None:
    program = compile_selector(f"{D}.type == 'mig' || {D}.type == 'x'")
    explanation = explain(program, device(type={"string": "gpu"}), driver=DRIVER)
    assert explanation.reason == "the expression is false"


@pytest.mark.parametrize("runner", list(RunnerKind))
def test_explain_shows_a_bare_literal_clause_as_written(runner: RunnerKind) -> None:
    """A ``true``/``false`` clause has its own source span, not the whole expression's."""
    expression = f"device.driver == '{DRIVER}' && false"
    explanation = explain(compile_selector(expression, runner=runner), device(), driver=DRIVER)
    assert explanation.reason == "clause 2 of 2 is false: false"
    assert [c.text for c in explanation.clauses] == [f"device.driver == '{DRIVER}'", "false"]
    leading = explain(compile_selector(f"true && {D}.type == 'mig'"), device(type={"string": "gpu"}), driver=DRIVER)
    assert [c.text for c in leading.clauses] == ["true", f"{D}.type == 'mig'"]
    assert leading.reason == f"clause 2 of 2 is false: {D}.type == 'mig'"
