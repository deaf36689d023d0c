"""The alias cases against the reference engine: they pass when it serves the aliases, check
(not skip) REQ-ALIAS-002 whenever an alias is served, and say so when none is."""

from __future__ import annotations

from tests.conformance.conftest import failed, reference_engine, run_suite

BOTH = ("openengine", "control")
ALIAS_CASES = {"alias.health", "alias.unadvertised-unimplemented", "alias.shared-requests",
               "alias.admin-guard", "alias.same-answers"}


def _outcomes(report) -> dict[str, str]:
    return {r.id: str(r.outcome) for r in report.results if r.id.startswith("alias.")}


def test_alias_cases_pass_against_served_aliases():
    with reference_engine(profiles=("load", "admin"), aliases=BOTH) as engine:
        report = run_suite(engine.address, patterns=["alias.*"])
    assert failed(report) == {}
    outcomes = _outcomes(report)
    assert set(outcomes) == ALIAS_CASES
    # kv and runtime-events are not advertised, so every case can observe its requirement.
    assert set(outcomes.values()) == {"pass"}, outcomes


def test_req_alias_002_is_checked_whenever_one_alias_is_served():
    for served in (("openengine",), ("control",)):
        with reference_engine(profiles=("load",), aliases=served) as engine:
            report = run_suite(engine.address, patterns=["alias.shared-requests", "alias.same-answers"])
        assert failed(report) == {}
        assert set(_outcomes(report).values()) == {"pass"}, (served, _outcomes(report))


def test_without_an_alias_only_health_absence_is_checked():
    with reference_engine(profiles=("load",)) as engine:
        report = run_suite(engine.address, patterns=["alias.*"])
    outcomes = _outcomes(report)
    assert outcomes.pop("alias.health") == "pass"
    assert set(outcomes.values()) == {"skip"}
    assert all("serves no compatibility alias" in r.reason for r in report.results
               if r.id in outcomes)


def test_alias_cases_pass_when_admin_has_its_own_address():
    import socket

    from openengine.engine import AdminConfig

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with reference_engine(profiles=("load", "admin"), aliases=BOTH,
                          admin=AdminConfig(token="conformance-test-token", port=port)) as engine:
        report = run_suite(engine.address, patterns=["alias.*"], admin_target=engine.engine.admin_address)
    assert failed(report) == {}
    assert set(_outcomes(report).values()) == {"pass"}, _outcomes(report)
