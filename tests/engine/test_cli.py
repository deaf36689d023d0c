"""`oespec engine` as a process: start on port 0, log the address, stop cleanly on SIGTERM with
health NOT_SERVING first; refuse invalid configurations; list the faults."""

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

from openengine.engine import FAULTS
from openengine.v1 import discovery_pb2, discovery_service_pb2_grpc

OESPEC = [sys.executable, "-m", "oespec.cli"]
H = health_pb2.HealthCheckResponse


@pytest.mark.slow
def test_list_faults_prints_one_line_per_fault():
    out = subprocess.run(OESPEC + ["engine", "--list-faults"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(FAULTS)
    for line, fault in zip(lines, FAULTS.values()):   # with the part of the server it wraps
        assert line.endswith(f"[{fault.part}]"), line


@pytest.mark.slow
def test_invalid_combination_is_refused_at_start():
    out = subprocess.run(OESPEC + ["engine", "--port", "0", "--profiles", "core,kv"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "openengine.kv is scoped to role" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.slow
def test_subprocess_serves_then_stops_cleanly_with_not_serving_first():
    proc = subprocess.Popen(OESPEC + ["engine", "--port", "0", "--profiles", "load,runtime-events",
                                      "--token-delay-ms", "1"],
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
                assert "openengine.load 1.0" in profiles and "openengine.runtime-events 1.0" in profiles
                break
        assert address and not address.endswith(":0"), lines
        with grpc.insecure_channel(address) as ch:
            info = discovery_service_pb2_grpc.DiscoveryStub(ch).GetEngineInfo(discovery_pb2.GetEngineInfoRequest(), timeout=10)
            assert info.instance_id
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
