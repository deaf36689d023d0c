"""The compiled descriptors carry every registry fact the runtime reads, and say the same thing.

`openengine.contract` reads only the bindings; this test reads both the bindings and
`profiles.yaml` and fails when the generated options lose or change a declaration.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from oespec.registry import load_registry
from openengine.contract import catalogue, role_numbers, role_spelling
from openengine.v1 import server_pb2

ROOT = Path(__file__).resolve().parents[2]


@cache
def registry():
    """profiles.yaml, read when a test first needs it, not when the suite is collected."""
    return load_registry(ROOT / "profiles.yaml").registry

CAT = catalogue()


def test_registry_revisions_are_compiled():
    assert CAT.registry_revision == registry().revision
    assert CAT.schema_revision == (registry().schema_revision or 0)


def test_every_profile_declaration_is_compiled():
    assert sorted(p.name for p in CAT.profiles) == sorted(p.name for p in registry().profiles)
    assert CAT.core == registry().core.name
    for declared in registry().profiles:
        compiled = CAT.profile(declared.name)
        assert compiled.version == (declared.version.major, declared.version.minor)
        assert compiled.mandatory == declared.mandatory
        assert compiled.deprecated == (declared.deprecated or "").strip()
        assert compiled.scope == declared.scope.kind and compiled.roles == declared.scope.roles
        assert [(r.profile, r.range) for r in compiled.requires] == [(r.profile, r.range) for r in declared.requires]
        assert len(compiled.incompatible_with) == len(declared.incompatible_with)
        for got, want in zip(compiled.incompatible_with, declared.incompatible_with):
            assert got.profile == want.profile and got.reason == want.reason.strip()
            assert [str(c) for c in got.when] == [str(c) for c in want.when]
            assert [c.value for c in got.when] == [c.value for c in want.when]


def test_roles_come_from_the_role_enum():
    numbers = role_numbers()
    assert numbers["prefill"] == server_pb2.ENGINE_ROLE_PREFILL and 0 not in numbers.values()
    assert numbers["encoder"] == server_pb2.ENGINE_ROLE_ENCODER
    roles_in_scopes = {r for p in registry().profiles for r in p.scope.roles}
    assert roles_in_scopes <= set(numbers)
    assert role_spelling(server_pb2.ENGINE_ROLE_DECODE) == "ENGINE_ROLE_DECODE" and role_spelling(99) == "99"


def test_work_services_are_the_ones_the_spec_names_and_exist():
    import re

    from openengine.contract import WORK_SERVICES

    health = (ROOT / "spec" / "health.md").read_text(encoding="utf-8")
    paragraph = health.split("**work services**", 1)[1].split("\n\n", 1)[0].split("**control services**", 1)[0]
    named = re.findall(r"`(openengine\.v1\.[A-Za-z]+)`", paragraph)
    assert tuple(named) == WORK_SERVICES
    assert set(WORK_SERVICES) <= set(CAT.services)


CHECKS = {"profile", "at_most", "enabled", "member", "count_at_most", "below_needs", "ignored"}


def test_every_request_limit_option_names_a_real_field_profile_and_limit():
    """The request messages' `request_limit` options are read at run time; a typo in one must fail
    here, not silently stop a check."""
    requests = {r.method.input_type.name: r.method.input_type for r in CAT.rpcs}
    rows = CAT.request_limits
    assert rows and {r.request for r in rows} >= {"GenerateRequest", "EmbedRequest", "EncodeRequest"}
    for row in rows:
        where = f"{row.request} {row.field!r} {row.check}"
        assert row.check in CHECKS, where
        profile = CAT.profile(row.profile)
        assert profile is not None, where
        assert (row.limit is None) == (row.check == "profile"), where
        if row.limit is not None:
            assert profile.limit(row.limit) is not None, where
        if row.check == "below_needs":
            assert profile.limit(row.when) is not None and profile.limit(row.when).kind == "bool", where
        message = requests[row.request]
        head, _, oneof = row.field.partition("|")
        for part in [p for p in head.split(".") if p]:
            field = message.fields_by_name.get(part.removesuffix("[]"))
            assert field is not None, f"{where}: no field {part}"
            message = field.message_type if field.message_type is not None else message
        if oneof:
            assert oneof in message.oneofs_by_name, f"{where}: no oneof {oneof}"
            if row.when is not None:
                assert row.when in [f.name for f in message.oneofs_by_name[oneof].fields], where
