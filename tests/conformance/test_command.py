"""`oespec conformance` arguments and targets: bad input and wrong addresses give one clear line
and exit 2 before any case runs, never a conformance verdict."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

from oespec.cli import run

FAST = ["--rpc-timeout", "1", "--case-timeout", "2"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _conformance(capsys, *args):
    code = run(["conformance", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("target, says", [
    ("127.0.0.1", "has no port"),
    ("nohostport", "has no port"),
    ("127.0.0.1:99999", "outside 1..65535"),
    ("127.0.0.1:0", "outside 1..65535"),
    (":50051", "has no host"),
    ("127.0.0.1:http", "is not a number"),
    ("::1:50051", "IPv6 address in brackets"),
    ("bad host:50051", "not a host name"),
    ("http://host:1/", "is a URL; give the address alone, HOST:PORT without a scheme or path, e.g. --target host:1"),
    ("https://engine.example:443/v1", "--target engine.example:443 --tls"),
    ("grpc://[::1]:50051", "e.g. --target [::1]:50051"),
    ("a:5:6", "has 2 colons: write one host and one port"),
    ("::1", "is an IPv6 address without a port"),
])
def test_a_malformed_target_is_an_argument_error(capsys, target, says):
    code, out, err = _conformance(capsys, "--target", target)
    assert code == 2 and out == ""
    assert says in err and len(err.strip().splitlines()) == 1


def test_a_malformed_admin_target_is_an_argument_error(capsys):
    code, _, err = _conformance(capsys, "--target", "127.0.0.1:1", "--admin-target", "127.0.0.1")
    assert code == 2 and "--admin-target" in err and "has no port" in err


def test_ipv6_targets_are_accepted():
    from openengine.conformance import parse_target

    assert str(parse_target("[::1]:50051")) == "[::1]:50051"
    assert parse_target("localhost:1").port == 1


def test_nothing_listening_is_unusable_not_non_conforming(capsys):
    port = _free_port()
    code, out, err = _conformance(capsys, "--target", f"127.0.0.1:{port}", "--format", "json", *FAST)
    assert code == 2 and out == ""
    assert err.strip() == (f"oespec conformance: cannot reach 127.0.0.1:{port}: nothing is listening "
                           "there (connection refused)")


def test_an_unknown_host_is_unusable(capsys):
    code, out, err = _conformance(capsys, "--target", "no-such-host.invalid:50051", *FAST)
    assert code == 2 and "DOES NOT CONFORM" not in out
    assert err.strip() == ("oespec conformance: cannot reach no-such-host.invalid:50051: the host "
                           "name does not resolve")


class _Http(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (the standard library's name)
        self.send_response(200)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args):
        pass


def test_an_http_server_is_unusable(capsys):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Http)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        target = f"127.0.0.1:{server.server_address[1]}"
        code, out, err = _conformance(capsys, "--target", target, *FAST)
    finally:
        server.shutdown()
        server.server_close()
    assert code == 2 and "DOES NOT CONFORM" not in out
    assert err.strip() == (f"oespec conformance: cannot reach {target}: the server there does not "
                           "speak gRPC (HTTP/2); is it an HTTP/1 server?")


def test_a_case_pattern_that_matches_nothing_is_an_argument_error(capsys):
    code, out, err = _conformance(capsys, "--target", "127.0.0.1:1", "--case", "nomatch",
                                  "--case", "load.*")
    assert code == 2 and out == ""
    assert "--case nomatch matches no case" in err and "load.*" not in err


@pytest.mark.parametrize("option", ["--junit", "--report"])
def test_an_unwritable_report_path_is_refused_before_the_run(capsys, tmp_path, option):
    port = _free_port()       # nothing listens: the refusal must come before any connection
    code, _, err = _conformance(capsys, "--target", f"127.0.0.1:{port}",
                                option, str(tmp_path / "no-such-dir" / "r.xml"))
    assert code == 2 and option in err and "does not exist" in err and "cannot reach" not in err
    code, _, err = _conformance(capsys, "--target", f"127.0.0.1:{port}", option, str(tmp_path))
    assert code == 2 and "is a directory" in err


def test_admin_client_certificate_options_go_together(capsys, tmp_path):
    code, _, err = _conformance(capsys, "--target", "127.0.0.1:1", "--admin-target", "127.0.0.1:2",
                                "--admin-cert", str(tmp_path / "c.pem"))
    assert code == 2 and "--admin-cert and --admin-key go together" in err


def test_a_grpc_server_without_control_or_inference_is_not_openengine(capsys):
    """Exit 2 is kept for a target that is not OpenEngine at all: a gRPC server with neither
    upstream's Control nor its Inference (here, the standard health service alone)."""
    from concurrent import futures

    import grpc
    from grpc_health.v1 import health, health_pb2_grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        code, out, err = _conformance(capsys, "--target", f"127.0.0.1:{port}", *FAST)
    finally:
        server.stop(None)
    assert code == 2 and out == ""
    assert err.strip() == (f"oespec conformance: 127.0.0.1:{port} speaks gRPC but serves neither "
                           "openengine.v1.Control nor openengine.v1.Inference: it is not an "
                           "OpenEngine engine's main address (an admin address goes in --admin-target)")


def test_an_engine_of_upstreams_layout_is_judged_with_the_usual_exit_status(capsys):
    from tests.conformance.otherengine import OtherEngine

    with OtherEngine(upstream_only=True) as engine:
        code, out, err = _conformance(capsys, "--target", engine.address, "--case", "core.discovery.answers",
                                      "--case", "core.generate.stream", *FAST)
    assert code == 1 and err == ""
    assert "PASS  core.generate.stream" in out and "FAIL  core.discovery.answers" in out
    assert "migration:" in out and "DOES NOT CONFORM" in out
