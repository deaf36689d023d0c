"""`oespec engine` as a process: start on port 0 with no flag but the port, serve upstream's
Control, log the address, stop cleanly on SIGTERM with health NOT_SERVING first; refuse invalid
configurations with the reason."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from openengine.v1 import control_service_pb2_grpc, server_pb2

OESPEC = [sys.executable, "-m", "oespec.cli"]
H = health_pb2.HealthCheckResponse


@pytest.mark.slow
def test_invalid_combination_is_refused_at_start():
    out = subprocess.run(OESPEC + ["engine", "--port", "0", "--profiles", "core,kv"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "openengine.kv is for the roles prefill, decode" in out.stderr
    # The connection flags reach the SDK, which judges them.
    out = subprocess.run(OESPEC + ["engine", "--check-config", "--max-pending-calls", "0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "max_pending_calls 0" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_subprocess_serves_then_stops_cleanly_with_not_serving_first():
    proc = subprocess.Popen(OESPEC + ["engine", "--port", "0"],
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    try:
        address, lines = None, []
        profiles = None
        for line in proc.stderr:
            lines.append(line)
            m = re.search(r"serving on (\S+)", line)
            if m:
                address = m.group(1)
            if "profiles:" in line:
                profiles = line
            if address and profiles:
                assert "openengine.load 1.0" in profiles and "openengine.admin 1.0" in profiles
                break
        assert address and not address.endswith(":0"), lines
        with grpc.insecure_channel(address) as ch:
            info = control_service_pb2_grpc.ControlStub(ch).GetServerInfo(server_pb2.GetServerInfoRequest(), timeout=10)
            assert info.instance_id and info.minimum_client_revision == 1
            watch = health_pb2_grpc.HealthStub(ch).Watch(health_pb2.HealthCheckRequest(service=""), timeout=20)
            statuses = [next(watch).status]
            assert statuses == [H.SERVING]
            done = threading.Event()

            def drain():
                try:
                    for msg in watch:
                        statuses.append(msg.status)
                except grpc.RpcError:
                    pass
                done.set()

            reader = threading.Thread(target=drain, daemon=True)
            reader.start()
            proc.send_signal(signal.SIGTERM)
            assert done.wait(20)
        assert proc.wait(20) == 0
        assert statuses[-1] == H.NOT_SERVING and statuses[0] == H.SERVING
        rest = proc.stderr.read()
        assert "stopping: health NOT_SERVING" in rest and "stopped" in rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
