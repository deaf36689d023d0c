"""What `make check` finds in a change to proto/: the cross-check of the registry against the
compiled protos (OE1xx) and the upstream gate (OEB1xx), on the repository's own registry and
upstream pin. Each case of tests/data/contract/ is one change and exactly the findings it must
produce."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from oespec.check import run_rules
from oespec.check.proto_crosscheck import Contract, load_contract
from oespec.registry import load_registry
from oespec.upstream import check as upstream_gate
from tests.fixture_cases import CONTRACT_CASES, contract_case

ROOT = Path(__file__).resolve().parents[2]
CASES = sorted(p.parent.name for p in CONTRACT_CASES.glob("*/expected.yaml"))


@pytest.mark.parametrize("case", CASES)
def test_contract_case_has_exactly_the_expected_findings(case):
    proto, image = contract_case(case), ROOT / "upstream" / "openengine-v1.binpb"
    contract = load_contract(proto, "proto", upstream_image=image)
    assert isinstance(contract, Contract), contract
    resolved = load_registry(ROOT / "profiles.yaml", display_path="profiles.yaml")
    gate = upstream_gate(proto, image, ROOT / "upstream" / "PIN.md", use_buf=False)
    found = sorted((d.rule_id, d.path.replace(proto.as_posix(), "proto"), d.line)
                   for d in run_rules(resolved, contract=contract) + gate)
    expected = YAML(typ="safe").load((CONTRACT_CASES / case / "expected.yaml").read_text())
    assert found == sorted((e["rule"], e["path"], e["line"]) for e in expected)
