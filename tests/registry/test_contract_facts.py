"""A contract fact lives in the registry or the protos, never in a hand table.

Which spec areas belong to a profile (`requirement_areas`) and which limits `UpdateConfig` may
change (`updatable`) are declared in profiles.yaml; the runtime reads the second from the compiled
descriptors. A Python literal that lists limit references (`openengine.core.max_sequences`), or
maps profiles to the registry's own facts (requirement areas, versions, RPC names), is a second
copy that drifts: every source file of the toolkit and the runtime is searched for one.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

from oespec.registry import load_registry

ROOT = Path(__file__).resolve().parents[2]
BUILD_OUTPUTS = ("openengine/v1/",)


@cache
def registry():
    """profiles.yaml, read when a test first needs it, not when the suite is collected."""
    resolved = load_registry(ROOT / "profiles.yaml")
    assert resolved.registry is not None, resolved.diagnostics
    return resolved.registry


@cache
def known() -> tuple[set[str], set[str], set[str]]:
    """The registry's profile names, limit references and what it says about a profile besides
    its limits' values: areas, versions, RPCs."""
    profiles = registry().profiles
    return ({p.name for p in profiles}, {f"{p.name}.{lim.name}" for p in profiles for lim in p.limits},
            {a for p in profiles for a in p.requirement_areas} | {str(p.version) for p in profiles}
            | {r.name for p in profiles for r in p.rpcs})


def _strings(nodes) -> list[str]:
    out = []
    for node in nodes:
        for inner in ast.walk(node) if node is not None else ():
            if isinstance(inner, ast.Constant) and isinstance(inner.value, str):
                out.append(inner.value)
    return out


def hand_tables(source: str, filename: str = "<sample>") -> list[str]:
    """`line: what` for each literal that copies a contract fact."""
    profiles, limit_refs, profile_facts = known()
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, (ast.Set, ast.List, ast.Tuple, ast.Dict)):
            items = node.keys if isinstance(node, ast.Dict) else node.elts
            limits = [s for s in _strings(items) if s in limit_refs]
            if len(limits) >= 2:
                found.append(f"{node.lineno}: lists limits {', '.join(limits[:3])}")
        if isinstance(node, ast.Dict):
            keyed = [k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in profiles]
            facts = [s for s in _strings(node.values) if s in profile_facts]
            if len(keyed) >= 2 and facts:
                found.append(f"{node.lineno}: maps {', '.join(keyed[:3])} to registry facts ({', '.join(facts[:3])})")
    return found


def _sources() -> list[Path]:
    files = sorted(p for folder in ("oespec", "openengine") for p in (ROOT / folder).rglob("*.py"))
    return [p for p in files if not p.relative_to(ROOT).as_posix().startswith(BUILD_OUTPUTS)]


@pytest.mark.parametrize("path", _sources(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_contract_fact_is_a_hand_table(path: Path):
    assert hand_tables(path.read_text(encoding="utf-8"), str(path)) == []


def test_the_search_finds_both_kinds_of_table():
    sample = (
        "AREAS = {'openengine.core': ('CORE', 'CAP'), 'openengine.load': ('LOAD',)}\n"
        "UPDATABLE = {'openengine.core.max_sequences', 'openengine.load.max_watchers'}\n"
        "CHOICES = {'openengine.core': {'max_sequences': 4}, 'openengine.load': {'per_rank': True}}\n"
        "LOAD, ADMIN = 'openengine.load', 'openengine.admin'\n")
    found = hand_tables(sample)
    assert [line.split(":")[0] for line in found] == ["1", "2"], found


def test_the_runtime_reads_updatable_limits_from_the_descriptors():
    from openengine.contract import catalogue

    declared = {f"{p.name}.{lim.name}" for p in registry().profiles for lim in p.limits if lim.updatable}
    assert declared and catalogue().updatable_limits == declared
    assert catalogue().limit("openengine.core.max_running_requests").updatable
    assert not catalogue().limit("openengine.core.speculative_decoding").updatable


def test_requirement_areas_come_from_the_registry():
    core = registry().profile("openengine.core")
    assert core.requirement_areas == ("CORE", "CAP", "HEALTH", "REV")
    assert registry().profile("openengine.encoder").requirement_areas == ("ENC",)
