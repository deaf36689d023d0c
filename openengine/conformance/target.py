"""The target of a run: parse `HOST:PORT`, and check before any case that something at that
address speaks gRPC and serves OpenEngine discovery.

A wrong address is not a conformance verdict: nothing listening, an unknown host, an HTTP server
or a gRPC server without `openengine.v1.Discovery` raise `TargetUnusable` with one line saying
what was found, and the command exits 2 as for any other unusable input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import grpc

_HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")


class TargetUnusable(Exception):
    """The target cannot be checked at all; the message is one line saying why."""


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_target(text: str, *, option: str = "--target") -> Address:
    """`HOST:PORT` or `[IPv6]:PORT`, the port 1..65535 and never implied.

    ValueError names the option, what was wrong and what to write instead."""
    example = f"{option} 127.0.0.1:50051"
    value = (text or "").strip()
    if value.startswith("["):
        host, sep, port = value[1:].partition("]:")
        if not sep or not host:
            raise ValueError(f"{option} {text!r}: an IPv6 address is written [ADDRESS]:PORT, "
                             f"e.g. {option} [::1]:50051")
    else:
        host, sep, port = value.rpartition(":")
        if not sep:
            raise ValueError(f"{option} {text!r} has no port: write HOST:PORT, e.g. {example} "
                             "(there is no default port)")
        if not host:
            raise ValueError(f"{option} {text!r} has no host: write HOST:PORT, e.g. {example}")
        if ":" in host:
            raise ValueError(f"{option} {text!r}: write an IPv6 address in brackets, "
                             f"e.g. {option} [::1]:50051")
        if not _HOST_RE.match(host):
            raise ValueError(f"{option} {text!r}: {host!r} is not a host name or address")
    if not port.isdigit():
        raise ValueError(f"{option} {text!r}: the port {port!r} is not a number; write HOST:PORT, "
                         f"e.g. {example}")
    number = int(port)
    if not 1 <= number <= 65535:
        raise ValueError(f"{option} {text!r}: port {number} is outside 1..65535")
    return Address(host, number)


def _unreachable_reason(details: str) -> str:
    """A short reason from gRPC's connection error text."""
    low = details.lower()
    if "dns resolution failed" in low or "name or service not known" in low \
            or "could not resolve" in low or "lookup" in low or "domain name not found" in low:
        return "the host name does not resolve"
    if "http1" in low or "http/1" in low or "expected settings frame" in low:
        return "the server there does not speak gRPC (HTTP/2); is it an HTTP/1 server?"
    if "connection refused" in low:
        return "nothing is listening there (connection refused)"
    if "handshake" in low or "ssl" in low or "tls" in low:
        return f"the TLS handshake failed ({details.strip()})"
    return f"no gRPC server answered ({details.strip() or 'UNAVAILABLE'})"


async def preflight(ctx) -> None:
    """One harmless call before the suite: GetEngineInfo on the main address.

    UNAVAILABLE (refused, unknown host, not HTTP/2) and a connection that never becomes ready are
    unusable targets; UNIMPLEMENTED means a gRPC server that is not an OpenEngine engine. Any
    other outcome, a slow or malformed answer included, is for the cases to judge."""
    from openengine.v1 import discovery_pb2

    target = ctx.options.target
    try:
        await ctx.discovery_rpc.GetEngineInfo(discovery_pb2.GetEngineInfoRequest())
        await _serving(ctx)
        return
    except grpc.aio.AioRpcError as err:
        code, details = err.code(), err.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE:
        raise TargetUnusable(f"cannot reach {target}: {_unreachable_reason(details)}")
    if code == grpc.StatusCode.UNIMPLEMENTED:
        raise TargetUnusable(
            f"{target} speaks gRPC but does not serve openengine.v1.Discovery: it is not an "
            "OpenEngine engine's main address (an admin address goes in --admin-target)")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        state = ctx.channel.get_state(try_to_connect=False)
        if state != grpc.ChannelConnectivity.READY:
            raise TargetUnusable(f"cannot reach {target}: no gRPC connection within "
                                 f"{ctx.options.rpc_timeout:g} s (it accepts connections but "
                                 "does not speak HTTP/2)")
    # A connected server that answered badly or slowly: the discovery case reports it.


NOT_SERVING_WAIT_SECONDS = 5.0


async def _serving(ctx) -> None:
    """The engine is ready for work, or a run would report every case that needs it as a
    failure. An engine still starting gets a few seconds; a health service that fails is for
    the health cases to judge."""
    from grpc_health.v1 import health_pb2

    serving = health_pb2.HealthCheckResponse.SERVING
    try:
        if await ctx.wait_health("openengine.v1.Inference", serving, within=NOT_SERVING_WAIT_SECONDS):
            return
        status = await ctx.check_health("openengine.v1.Inference")
    except grpc.aio.AioRpcError:
        return
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    raise TargetUnusable(
        f"{ctx.options.target} reports openengine.v1.Inference {name}: a run needs an engine ready "
        "for work (is it paused, asleep or draining, perhaps left so by an earlier run?)")
