"""Faults are layers declared beside them in the fault table: the SDK and the backend never name
a fault, and an engine without faults runs its parts as the SDK built them."""

from __future__ import annotations

from pathlib import Path

import pytest

from openengine.engine import AdminConfig, EngineConfig, EngineServer, FAULTS
from openengine.engine import faults as faults_module
from openengine.serve import Gate
from openengine.serve.admission import Admission

ENGINE = Path(faults_module.__file__).resolve().parent
SDK = ENGINE.parent / "serve"


def _sources(folder: Path) -> dict[Path, str]:
    return {p: p.read_text() for p in folder.rglob("*.py") if p.name != "faults.py"}


def test_every_fault_names_the_part_it_wraps_and_a_layer():
    for fault in FAULTS.values():
        assert fault.part and callable(fault.layer), fault.name


def test_no_code_outside_the_fault_table_names_a_fault():
    for path, text in {**_sources(ENGINE), **_sources(SDK)}.items():
        for name in FAULTS:
            assert f'"{name}"' not in text, f"{path} names the fault {name}"


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_a_fault_changes_only_what_its_layer_wraps(name):
    # Admin on an address of its own, so the admin address's health is a part too.
    admin = AdminConfig(port=0, token="layers")
    plain = EngineServer(EngineConfig(port=0, aliases=("openengine", "control"), admin=admin))
    faulty = EngineServer(EngineConfig(port=0, aliases=("openengine", "control"), admin=admin, faults=(name,)))
    aliases = {a.service for a in faulty.aliases}
    changed = {"aliases" if service in aliases else service for service, impl in faulty.implementations.items()
               if type(impl) is not type(plain.implementations[service])
               or getattr(impl, "state", faulty.state) is not faulty.state}   # served over another state
    gates = [faulty.gate] + [faulty.implementations[service].gate for service in aliases]
    parts = changed | ({"gate"} if any(type(gate) is not Gate for gate in gates) else set()) \
        | ({"interceptors"} if faulty.interceptors != [faulty.wire] else set()) \
        | ({"admission"} if type(faulty.implementations["openengine.v1.Inference"].admission) is not Admission
           else set()) \
        | ({"health statuses"} if "desired_health" in vars(faulty) or "shutdown" in vars(faulty.health) else set()) \
        | ({"admin health"} if "update" in vars(faulty.admin_health) else set()) \
        | ({"state"} if "revise" in vars(faulty.state) else set()) \
        | ({"backend"} if {"generate", "abort"} & set(vars(faulty.backend)) else set())
    assert len(parts) == 1, f"{name} wraps {sorted(parts)}"
    # Without faults every part is the SDK's own.
    assert type(plain.gate) is Gate and plain.interceptors == [plain.wire] and "desired_health" not in vars(plain)
