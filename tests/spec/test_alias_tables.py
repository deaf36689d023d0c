"""spec/services.md's alias tables against the alias protos and the engine's alias table
(`openengine/aliases.py`): same methods, same v1 RPCs and profiles, and every field of every
translated earlier message listed once with its number, naming v1 fields that exist."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest
from google.protobuf import descriptor_pool
from grpc_health.v1 import health_pb2  # noqa: F401  (registers grpc.health.v1 messages)

import openengine.v1
from openengine.aliases import ALIASES, HEALTH_CHECK
from openengine.contract import CORE, catalogue

SERVICES_MD = Path(__file__).resolve().parents[2] / "spec" / "services.md"
POOL = descriptor_pool.Default()
# Protos reach the default pool when their generated modules are imported, which the runtime
# does lazily; load the v1 and alias modules here so the lookups below do not depend on which
# test happened to run first on this worker.
for _module in pkgutil.iter_modules(openengine.v1.__path__):
    if _module.name.endswith("_pb2"):
        importlib.import_module(f"openengine.v1.{_module.name}")
for _alias in ALIASES.values():
    _alias.descriptor

METHOD_HEADING = re.compile(r"^### `([\w.]+)` method by method$")
FIELD_HEADING = re.compile(r"^#### `([\w.]+)` (→|←) `([\w.]+)`$")
ROW = re.compile(r"^\|(.+)\|$")
TICKED = re.compile(r"`([^`]+)`")
V1_PATH = re.compile(r"^[a-z_]+(\.[a-z_]+)*$")
QUALIFIED_PATH = re.compile(r"^([A-Z]\w*)((\.[a-z_]+)+)$")


def _sections() -> dict[str, list[list[str]]]:
    """Heading line -> the rows (cells) of the table under it."""
    out: dict[str, list[list[str]]] = {}
    current = None
    for line in SERVICES_MD.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            current = line if (METHOD_HEADING.match(line) or FIELD_HEADING.match(line)) else None
            if current:
                out[current] = []
            continue
        m = ROW.match(line.strip())
        if current and m:
            cells = [c.strip() for c in m.group(1).split("|")]
            if set(cells[0]) <= {"-", " "} or cells[0] in ("earlier method", "field"):
                continue
            out[current].append(cells)
    return out


SECTIONS = _sections()


def _ticked(cell: str) -> list[str]:
    return TICKED.findall(cell)


def _profile_of(v1: str) -> str:
    if v1 == HEALTH_CHECK:
        return CORE
    rpc = next((r for r in catalogue().rpcs if r.name == v1), None)
    assert rpc is not None, f"{v1} is not an RPC of the compiled contract"
    return rpc.profile


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_method_table_matches_the_protos_and_the_engine(alias):
    service = ALIASES[alias]
    rows = SECTIONS.get(f"### `{service.service}` method by method")
    assert rows, f"spec/services.md has no method table for {service.service}"
    documented = {_ticked(cells[0])[0]: cells for cells in rows}
    assert list(documented) == [m.name for m in service.descriptor.methods], \
        "the table lists the methods of the alias proto, in its order"
    assert set(documented) == set(service.methods)
    for name, cells in documented.items():
        mapped = service.methods[name]
        assert mapped.v1 in _ticked(cells[1]), f"{name}: the table names {cells[1]}, the engine {mapped.v1}"
        assert cells[1].startswith("none:") == (not mapped.translated), name
        assert _ticked(cells[2]) == [_profile_of(mapped.v1)], f"{name}: profile"


def _resolve(message, path: str) -> bool:
    for part in path.split("."):
        field = message.fields_by_name.get(part)
        if field is None:
            return False
        message = field.message_type
        if message is None and part != path.split(".")[-1]:
            return False
    return True


def _translated_messages() -> set[str]:
    """Request and response messages of every translated alias method (empty ones aside)."""
    out = set()
    for service in ALIASES.values():
        for method in service.descriptor.methods:
            if not service.methods[method.name].translated:
                continue
            for message in (method.input_type, method.output_type):
                if message.fields:
                    out.add(message.full_name)
    return out


def test_every_translated_message_has_a_field_table():
    documented = {FIELD_HEADING.match(h).group(1) for h in SECTIONS if FIELD_HEADING.match(h)}
    missing = _translated_messages() - documented
    assert not missing, f"no translation table for {sorted(missing)}"


@pytest.mark.parametrize("heading", sorted(h for h in SECTIONS if FIELD_HEADING.match(h)))
def test_field_table_lists_every_field_and_names_real_v1_fields(heading):
    earlier_name, _, v1_name = FIELD_HEADING.match(heading).groups()
    earlier = POOL.FindMessageTypeByName(earlier_name)
    v1 = POOL.FindMessageTypeByName(v1_name)
    rows = SECTIONS[heading]
    listed = [(_ticked(cells[0])[0], int(cells[1])) for cells in rows]
    assert listed == [(f.name, f.number) for f in earlier.fields], \
        f"{heading}: rows must be the message's fields in order, with their numbers"
    for cells in rows:
        for token in _ticked(cells[2]):
            qualified = QUALIFIED_PATH.match(token)
            if qualified:
                target = POOL.FindMessageTypeByName(f"openengine.v1.{qualified.group(1)}")
                assert _resolve(target, qualified.group(2)[1:]), f"{heading}: {token} is not a v1 field"
            elif V1_PATH.match(token) and not token.startswith(("openengine.", "grpc.")):
                assert _resolve(v1, token), f"{heading}: {token} is not a field of {v1_name}"


def test_the_checks_can_fail():
    """A made-up row naming a missing v1 field, or a wrong number, is caught."""
    v1 = POOL.FindMessageTypeByName("openengine.v1.LoadInfo")
    assert not _resolve(v1, "running_request")
    assert _resolve(v1, "timestamp") and _resolve(v1, "ranks.used_kv_blocks")
