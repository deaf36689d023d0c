"""The reference engine conforms in every documented Admin set-up: Admin on the main address,
on an address of its own, and on its own address behind mutual TLS. Health on an address reports
the services served there (REQ-HEALTH-002/003, REQ-ADMIN-001)."""

from __future__ import annotations

import shutil

import pytest

from openengine.conformance import Outcome

from tests.conformance.conftest import TOKEN, failed, reference_engine, run_suite
from tests.certificates import make_certificates

# Most of its time is spent waiting on engines' streams and timers (see tests/conftest.py).
pytestmark = pytest.mark.waits

# What Admin changes and what reports on it; the rest of the suite is covered elsewhere.
ADMIN_CASES = ["admin.*", "health.*", "core.capabilities.stable", "events.*", "admin.rpcs.served"]


def _outcomes(report) -> dict[str, Outcome]:
    return {r.id: r.outcome for r in report.results}


@pytest.mark.slow
def test_admin_on_its_own_port_conforms():
    from openengine.serve import AdminAccess

    with reference_engine(admin=AdminAccess(port=0, token=TOKEN)) as engine:
        report = run_suite(engine.address, patterns=ADMIN_CASES,
                           admin_target=engine.server.admin_address)
    assert failed(report) == {}
    outcomes = _outcomes(report)
    for case_id in ("admin.own-address-health", "admin.unauthenticated", "admin.pause-resume",
                    "health.check.advertised-services", "health.watch.first-message",
                    "health.pause.control-serving", "admin.rpcs.served"):
        assert outcomes[case_id] is Outcome.PASS, case_id


@pytest.mark.slow
def test_admin_elsewhere_without_its_address_is_unchecked_with_a_hint():
    from openengine.serve import AdminAccess

    with reference_engine(admin=AdminAccess(port=0, token=TOKEN)) as engine:
        report = run_suite(engine.address, patterns=ADMIN_CASES)
    assert failed(report) == {}, "a missing --admin-target is not the engine's fault"
    unchecked = {r.id: r.reason for r in report.results if r.outcome is Outcome.UNCHECKED}
    for case_id in ("admin.pause-resume", "admin.own-address-health", "admin.rpcs.served",
                    "health.watch.change"):
        assert "--admin-target" in unchecked[case_id], (case_id, unchecked.get(case_id))
    # Health on the main address leaves out Admin, which is served elsewhere.
    assert _outcomes(report)["health.check.unknown-not-found"] is Outcome.PASS
    assert report.verdict.startswith("CONFORMS, ")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
@pytest.mark.parametrize("token", [None, TOKEN], ids=["mtls-only", "mtls-and-token"])
def test_admin_behind_mutual_tls_conforms(tmp_path, token):
    from openengine.serve import AdminAccess

    pem = make_certificates(tmp_path)
    admin = AdminAccess(port=0, token=token, tls_cert=pem["server.pem"], tls_key=pem["server.key"],
                        client_ca=pem["ca.pem"])
    with reference_engine(admin=admin) as engine:
        report = run_suite(engine.address, patterns=ADMIN_CASES, admin_token=token,
                           admin_target=engine.server.admin_address, admin_cert=pem["client.pem"],
                           admin_key=pem["client.key"], admin_ca=pem["ca.pem"])
    assert failed(report) == {}
    outcomes = _outcomes(report)
    for case_id in ("admin.own-address-health", "admin.unauthenticated", "admin.pause-resume",
                    "admin.rpcs.served", "health.pause.control-serving"):
        assert outcomes[case_id] is Outcome.PASS, case_id


@pytest.mark.slow
def test_the_runner_leaves_the_engine_serving_and_runs_drain_only_when_asked():
    from grpc_health.v1 import health_pb2
    import grpc
    from grpc_health.v1 import health_pb2_grpc

    def inference_status(address):
        with grpc.insecure_channel(address) as ch:
            return health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service="openengine.v1.Inference"), timeout=5).status

    with reference_engine() as engine:
        first = run_suite(engine.address, patterns=["admin.*"])
        assert _outcomes(first)["admin.drain"] is Outcome.UNCHECKED
        assert inference_status(engine.address) == health_pb2.HealthCheckResponse.SERVING
        again = run_suite(engine.address, patterns=["admin.*"])       # a second run is as good
        assert failed(again) == {} and failed(first) == {}
        drained = run_suite(engine.address, patterns=["admin.*"], destructive=True)
        assert _outcomes(drained)["admin.drain"] is Outcome.PASS
        assert [r.id for r in drained.results][-1] == "admin.drain"
        # Now the engine is drained: a run refuses to judge it, in one line.
        from openengine.conformance import TargetUnusable

        with pytest.raises(TargetUnusable, match="NOT_SERVING"):
            run_suite(engine.address, patterns=["admin.*"])
