"""Request number domains (REQ-SVC-005) live on the fields as `number_domain` options: preflight,
the conformance cases and the test engine read them from the compiled descriptors, and no
runtime module keeps a table of its own."""

from __future__ import annotations

import re
from pathlib import Path

from google.protobuf.descriptor import FieldDescriptor

from openengine.contract import NumberDomain, catalogue, number_domains
from openengine.validate import NUMBER_DOMAINS, number_violations
from openengine.v1 import generation_pb2

ROOT = Path(__file__).resolve().parents[2]
FLOATS = (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE)


def _fields():
    by_name = {}
    pending = [rpc.method.input_type for rpc in catalogue().rpcs]
    while pending:
        message = pending.pop()
        for f in message.fields:
            if f.full_name not in by_name:
                by_name[f.full_name] = f
                if f.message_type is not None:
                    pending.append(f.message_type)
    return by_name


def test_every_domain_is_on_a_number_of_a_request():
    fields = _fields()
    assert number_domains(), "no number_domain option found"
    for name, domain in number_domains().items():
        f = fields[name]
        target = f.message_type.fields_by_name["value"] if f.message_type is not None else f
        assert target.type in FLOATS, name
        assert domain.low is not None or domain.high is not None, name
        if domain.token_id_keys:
            assert f.message_type.fields_by_name["key"].type == FieldDescriptor.TYPE_UINT32, name


def test_preflight_judges_by_the_declared_domains():
    assert NUMBER_DOMAINS == number_domains()
    top_p = number_domains()["openengine.v1.SamplingParams.top_p"]
    assert top_p == NumberDomain(0, 1, low_open=True) and str(top_p) == "(0, 1]"
    for value in top_p.outside():
        request = generation_pb2.GenerateRequest(prompt="hi")
        request.sampling.top_p = value
        assert [v.rule_id for v in number_violations(request)] == ["OEV408"], value
    request = generation_pb2.GenerateRequest(prompt="hi")
    request.sampling.top_p = 1.0
    assert number_violations(request) == []


# A domain written as data in Python: `"top_p": (NAN, 7.0)`, `"top_p": lambda v: 0 < v <= 1`,
# `"...top_p": NumberDomain(0, 1)`.
HAND_TABLE = re.compile(r"[\"'][\w.]*\b(?:%s)[\"']\s*:\s*(?:\(\s*(?:NAN|INF|-?[\d.])|lambda \w+:[^\n,]*[<>]|NumberDomain\()"
                        % "|".join(re.escape(n.rsplit(".", 1)[1]) for n in number_domains()))


def test_no_module_keeps_a_table_of_domains():
    places = [ROOT / "openengine", ROOT / "tests" / "conformance" / "otherengine"]
    found = [f"{path.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}"
             for place in places for path in sorted(place.rglob("*.py"))
             for text in [path.read_text()] for m in HAND_TABLE.finditer(text)]
    assert not found, "domains belong in the protos' number_domain options: " + ", ".join(found)


def test_the_spec_table_states_the_declared_domains():
    """spec/services.md lists the domains for readers; it must say what the options say."""
    text = (ROOT / "spec" / "services.md").read_text()
    stated = {}
    for row in re.finditer(r"^\| `SamplingParams\.(\w+)`((?:, `\w+`)*)[^|]*\| `([^`]+)`", text, re.M):
        for name in [row.group(1)] + re.findall(r"`(\w+)`", row.group(2)):
            stated[f"openengine.v1.SamplingParams.{name}"] = row.group(3)
    assert stated == {name: str(domain) for name, domain in number_domains().items()}
