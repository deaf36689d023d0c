"""Faults are declared with the hook points they act at; the engine's correct code only passes
values through named hook points and never asks which fault is on."""

from __future__ import annotations

import re
from pathlib import Path

from openengine.engine import faults as faults_module
from openengine.engine.faults import FAULTS, HOOK_POINTS, Hooks

ENGINE = Path(faults_module.__file__).resolve().parent
SOURCES = {p: p.read_text() for p in ENGINE.rglob("*.py") if p.name != "faults.py"}
CALLED = re.compile(r"""(?:hooks\.at|hook)\(\s*["']([a-z0-9.-]+)["']""")


def test_every_fault_acts_at_declared_hook_points():
    for fault in FAULTS.values():
        assert fault.at, f"{fault.name} declares no hook point"
        assert set(fault.at) <= set(HOOK_POINTS), f"{fault.name}: {set(fault.at) - set(HOOK_POINTS)}"


def test_the_engine_calls_every_hook_point_and_only_those():
    called = {name for text in SOURCES.values() for name in CALLED.findall(text)}
    assert called == set(HOOK_POINTS)


def test_no_engine_code_outside_the_fault_table_names_a_fault():
    for path, text in SOURCES.items():
        assert ".fault(" not in text and "cfg.faults\" in" not in text, path
        for name in FAULTS:
            assert f'"{name}"' not in text, f"{path.relative_to(ENGINE)} names the fault {name}"


def test_hooks_pass_values_through_unless_a_fault_acts_there():
    idle = Hooks()
    assert idle.at("events.first-sequence", 1) == 1 and idle.at("watch.opening", ("settings",)) == ("settings",)
    faulty = Hooks(["events-sequence-from-zero", "watch-settings-not-first"])
    assert faulty.at("events.first-sequence", 1) == 0
    assert faulty.at("watch.opening", ("settings",)) == ("snapshot", "settings")
    assert faulty.at("sessions.ttl", 5, requested=9) == 5   # no active fault acts there
