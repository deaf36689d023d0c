"""The engine's connection policy (openengine.serve.ConnectionPolicy): a connection that sends
nothing, or only the HTTP/2 preface, is closed at the handshake timeout; one that settles but opens
no call gets GOAWAY at the idle timeout; a peer that stops answering pings is closed by keepalive;
and every closed connection gives its descriptor back. Each peer is a raw socket speaking just
enough HTTP/2, so the test sees exactly what the engine sends and when it hangs up."""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import time
from pathlib import Path

import pytest

from openengine.serve import CannotServe, ConnectionPolicy, RunningServer, ServeConfig, Server


def _example():
    path = Path(__file__).resolve().parents[2] / "examples" / "counting_engine.py"
    spec = importlib.util.spec_from_file_location("counting_engine", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("counting_engine", module)
    spec.loader.exec_module(module)
    return module


CountingBackend = _example().CountingBackend

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = bytes.fromhex("000000" "04" "00" "00000000")
SETTINGS_ACK = bytes.fromhex("000000" "04" "01" "00000000")
PING, GOAWAY = 6, 7
# How long a test waits for the engine to hang up: far beyond every timeout it configures.
PATIENCE_S = 20.0

# Short timeouts so each case closes in about a second.
QUICK = ConnectionPolicy(handshake_timeout_s=0.5, idle_timeout_s=0.8, keepalive_time_s=0.3,
                         keepalive_timeout_s=0.3)


def _engine(policy: ConnectionPolicy) -> RunningServer:
    return RunningServer(lambda: CountingBackend(), ServeConfig(port=0, connections=policy))


def _connect(address: str, send: bytes = b"") -> socket.socket:
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    if send:
        sock.sendall(send)
    return sock


def _frame_types_until_closed(sock: socket.socket) -> list[int]:
    """The HTTP/2 frame types the engine sent until it closed the connection; fails the test when
    the engine keeps it open for PATIENCE_S."""
    sock.settimeout(PATIENCE_S)
    received = b""
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            data = b""
        except socket.timeout:
            pytest.fail(f"the engine kept the connection open for {PATIENCE_S}s")
        if not data:
            break
        received += data
    types = []
    while len(received) >= 9:
        length = int.from_bytes(received[:3], "big")
        types.append(received[3])
        received = received[9 + length:]
    return types


def test_a_connection_that_sends_nothing_is_closed_at_the_handshake_timeout():
    with _engine(QUICK) as engine:
        with _connect(engine.address) as sock:
            _frame_types_until_closed(sock)


def test_a_connection_that_sends_only_the_preface_is_closed():
    with _engine(QUICK) as engine:
        with _connect(engine.address, PREFACE) as sock:
            _frame_types_until_closed(sock)


def test_a_settled_connection_with_no_call_gets_goaway_at_the_idle_timeout():
    # Keepalive far away, so only the idle timeout can close it.
    policy = ConnectionPolicy(handshake_timeout_s=5, idle_timeout_s=0.5, keepalive_time_s=600)
    with _engine(policy) as engine:
        with _connect(engine.address, PREFACE + EMPTY_SETTINGS + SETTINGS_ACK) as sock:
            types = _frame_types_until_closed(sock)
    assert GOAWAY in types and PING not in types


def test_a_peer_that_does_not_answer_pings_is_closed_by_keepalive():
    policy = ConnectionPolicy(handshake_timeout_s=5, idle_timeout_s=None, keepalive_time_s=0.3,
                              keepalive_timeout_s=0.3)
    with _engine(policy) as engine:
        with _connect(engine.address, PREFACE + EMPTY_SETTINGS + SETTINGS_ACK) as sock:
            types = _frame_types_until_closed(sock)
    assert types.index(PING) < types.index(GOAWAY)


def test_a_settled_connection_stays_open_without_an_idle_timeout():
    """The control: with neither an idle timeout nor keepalive due, nothing closes it."""
    policy = ConnectionPolicy(handshake_timeout_s=0.3, idle_timeout_s=None, keepalive_time_s=600)
    with _engine(policy) as engine:
        with _connect(engine.address, PREFACE + EMPTY_SETTINGS + SETTINGS_ACK) as sock:
            sock.settimeout(1.5)   # five handshake timeouts
            received = b""
            with pytest.raises(socket.timeout):
                while data := sock.recv(65536):
                    received += data


def _descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts descriptors in /proc")
def test_silent_connections_give_their_descriptors_back():
    with _engine(QUICK) as engine:
        with _connect(engine.address) as first:   # whatever gRPC opens once, on its first connection
            _frame_types_until_closed(first)
        before = _descriptors()
        peers = [_connect(engine.address, PREFACE if i % 3 == 0 else b"") for i in range(60)]
        for sock in peers:
            _frame_types_until_closed(sock)
            sock.close()
        # The engine's side of each is closed too: only then is the count back where it was
        # (read again while gRPC finishes a close it has begun).
        deadline = time.monotonic() + PATIENCE_S
        while _descriptors() > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _descriptors() <= before


def test_values_grpc_cannot_take_are_refused_at_start():
    with pytest.raises(CannotServe, match="handshake_timeout_s 0: must be between"):
        Server(CountingBackend(), ServeConfig(connections=ConnectionPolicy(handshake_timeout_s=0)))
    with pytest.raises(CannotServe, match="unrequested_call_timeout_s 0.5: gRPC counts it in whole seconds"):
        Server(CountingBackend(), ServeConfig(connections=ConnectionPolicy(unrequested_call_timeout_s=0.5)))


def test_the_policy_is_written_as_grpc_server_arguments():
    options = dict(ConnectionPolicy(handshake_timeout_s=2, idle_timeout_s=None, keepalive_time_s=30,
                                    keepalive_timeout_s=5, min_client_ping_interval_s=7,
                                    max_pending_calls=500, unrequested_call_timeout_s=45).options())
    assert options == {
        "grpc.server_handshake_timeout_ms": 2000, "grpc.keepalive_time_ms": 30000,
        "grpc.keepalive_timeout_ms": 5000, "grpc.http2.ping_timeout_ms": 5000,
        "grpc.http2.max_pings_without_data": 0, "grpc.http2.min_ping_interval_without_data_ms": 7000,
        "grpc.keepalive_permit_without_calls": 1, "grpc.server.max_pending_requests": 500,
        "grpc.server.max_pending_requests_hard_limit": 1000, "grpc.server_max_unrequested_time_in_server": 45}
    assert dict(ConnectionPolicy(idle_timeout_s=90).options())["grpc.max_connection_idle_ms"] == 90000


def test_oespec_engine_flags_set_the_policy():
    from oespec.cli import build_parser
    from oespec.commands.engine import connection_policy

    args = build_parser("engine").parse_args(["engine", "--backend", "llama", "--handshake-timeout-s", "3",
                                              "--idle-timeout-s", "0", "--keepalive-time-s", "15"])
    assert connection_policy(args) == ConnectionPolicy(handshake_timeout_s=3, idle_timeout_s=None,
                                                       keepalive_time_s=15)
    assert connection_policy(build_parser("engine").parse_args(["engine"])) == ConnectionPolicy()
