"""The target of a run: parse `HOST:PORT`, and check before any case that something at that
address speaks gRPC and serves OpenEngine (Control or Inference). A wrong address is no verdict:
it raises `TargetUnusable` with one line saying what was found (exit status 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

import grpc
from grpc_health.v1 import health_pb2

from openengine.conformance.context import poll
from openengine.v1 import generation_pb2, lifecycle_pb2

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
    if "://" in value or value.lower().startswith(("http:", "https:", "grpc:", "grpcs:")):
        raise ValueError(_url_message(option, text, value))
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
            if _is_ipv6(host):
                raise ValueError(f"{option} {text!r}: write an IPv6 address in brackets, "
                                 f"e.g. {option} [{host}]:{port}")
            if _is_ipv6(value):
                raise ValueError(f"{option} {text!r} is an IPv6 address without a port: write "
                                 f"[ADDRESS]:PORT, e.g. {option} [{value}]:50051")
            raise ValueError(f"{option} {text!r} has {value.count(':')} colons: write one host and "
                             f"one port, HOST:PORT, e.g. {example}")
        if not _HOST_RE.match(host):
            raise ValueError(f"{option} {text!r}: {host!r} is not a host name or address")
    if not port.isdigit():
        raise ValueError(f"{option} {text!r}: the port {port!r} is not a number; write HOST:PORT, "
                         f"e.g. {example}")
    number = int(port)
    if not 1 <= number <= 65535:
        raise ValueError(f"{option} {text!r}: port {number} is outside 1..65535")
    return Address(host, number)


def _is_ipv6(text: str) -> bool:
    try:
        return ipaddress.ip_address(text).version == 6
    except ValueError:
        return False


def _url_message(option: str, text: str, value: str) -> str:
    """A URL where HOST:PORT belongs: say so, and what to write instead."""
    parts = urlsplit(value if "://" in value else value.replace(":", "://", 1))
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or "HOST"
    shown_host = f"[{host}]" if ":" in host else host
    address = f"{shown_host}:{port}" if port else f"{shown_host}:PORT"
    tls = " --tls" if scheme in ("https", "grpcs") else ""
    return (f"{option} {text!r} is a URL; give the address alone, HOST:PORT without a scheme or "
            f"path, e.g. {option} {address}{tls}" +
            (" (TLS is asked for with --tls, not with the scheme)" if tls else ""))


async def probe_tls(address: Address, timeout: float) -> tuple[bool, bool, bool]:
    """One connection to `address`: (whether it accepts TCP, whether a TLS handshake then
    completes, whether the server then refuses a client without a certificate: TLS 1.3 shows
    that only after the handshake). The server's certificate is not judged: this only tells a
    TLS server from a plaintext one."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(address.host, address.port), timeout)
    except (OSError, asyncio.TimeoutError):
        return False, False, False
    handshake = False
    try:
        await asyncio.wait_for(writer.start_tls(context, server_hostname=address.host), timeout)
        handshake = True
        # A gRPC server speaks first after the handshake (its HTTP/2 settings); one that closes
        # the connection instead, before the client said anything, refused the client's
        # certificate, and without one offered that means it wants one.
        return True, True, await asyncio.wait_for(reader.read(1), min(timeout, 0.5)) == b""
    except ssl.SSLError as err:
        # A TLS alert comes from a TLS server; anything else (a wrong version, an early end) is a
        # peer that does not speak TLS.
        said = str(err).lower().replace("_", " ")
        tls = handshake or "alert" in said
        return True, tls, tls and "certificate required" in said
    except (OSError, asyncio.TimeoutError, ValueError):
        return True, handshake, False
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), timeout)


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
    if "certificate_verify_failed" in low or "unable to get local issuer" in low:
        return ("its TLS certificate is not signed by a CA the runner trusts: give the CA that "
                "signed it with --ca PEM")
    if "hostname verification" in low or "no match found for server name" in low:
        return ("its TLS certificate does not name the host of --target: give the name the "
                "certificate carries with --server-name NAME")
    if "certificate required" in low or "peer did not return a certificate" in low:
        return "it asks for a client certificate: give one with --cert PEM and --key PEM"
    if "handshake" in low or "ssl" in low or "tls" in low:
        return f"the TLS handshake failed ({details.strip()})"
    return f"no gRPC server answered ({details.strip() or 'UNAVAILABLE'})"


async def preflight(ctx) -> None:
    """One harmless call before the suite (Control/GetServerInfo): no connection, or a gRPC server
    serving neither Control nor Inference, is an unusable target; any other outcome, a slow or
    malformed answer included, is for the cases to judge."""
    target = ctx.options.target
    try:
        await ctx.control.GetServerInfo()
        await _serving(ctx)
        return
    except grpc.aio.AioRpcError as err:
        code, details = err.code(), err.details() or ""
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        await _tls_mismatch(ctx)
    if code == grpc.StatusCode.UNAVAILABLE:
        raise TargetUnusable(f"cannot reach {target}: {_unreachable_reason(details)}")
    if code == grpc.StatusCode.UNIMPLEMENTED and not await _serves_inference(ctx):
        raise TargetUnusable(
            f"{target} speaks gRPC but serves neither openengine.v1.Control nor "
            "openengine.v1.Inference: it is not an OpenEngine engine's main address (an admin "
            "address goes in --admin-target)")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        state = ctx.channel.get_state(try_to_connect=False)
        if state != grpc.ChannelConnectivity.READY:
            raise TargetUnusable(f"cannot reach {target}: no gRPC connection within "
                                 f"{ctx.options.rpc_timeout:g} s (it accepts connections but "
                                 "does not speak HTTP/2)")
    # A connected server that answered badly or slowly: the discovery case reports it.


async def _serves_inference(ctx) -> bool:
    """Whether Inference/Generate exists: a request naming no model and no prompt, which any
    engine refuses before doing anything, answers something other than UNIMPLEMENTED."""
    call = ctx.inference.Generate(generation_pb2.GenerateRequest(request_id="conformance-probe"))
    try:
        async for _ in call:
            pass
    except grpc.aio.AioRpcError as err:
        return err.code() != grpc.StatusCode.UNIMPLEMENTED
    finally:
        call.cancel()
    return True


async def _tls_mismatch(ctx) -> None:
    """A target that could not be reached because the runner and the server disagree about TLS
    gets one line saying so, whatever gRPC's own error text says."""
    options = ctx.options
    listening, tls, wants_certificate = await probe_tls(parse_target(options.target), options.rpc_timeout)
    if tls and options.main_tls and wants_certificate and not options.cert:
        raise TargetUnusable(f"{options.target} asks for a client certificate: give one with "
                             "--cert PEM and its key with --key PEM")
    if tls and not options.main_tls:
        raise TargetUnusable(
            f"{options.target} speaks TLS: check it with --tls (add --ca PEM when its certificate "
            "is not signed by a CA this machine trusts, --cert/--key when it asks for a client "
            "certificate, --server-name NAME when the certificate names another host)")
    if listening and not tls and options.main_tls:
        raise TargetUnusable(f"{options.target} does not speak TLS (a TLS handshake got no answer "
                             "a TLS server gives): drop --tls and the TLS options")


NOT_SERVING_WAIT_SECONDS = 5.0
INFERENCE = "openengine.v1.Inference"


async def _serving(ctx) -> None:
    """The engine is ready for work (after a few seconds to start), by the standard health
    service, or upstream's Control/Health without one; a failing health service is the health
    cases' to judge."""
    serving = health_pb2.HealthCheckResponse.SERVING
    try:
        # One Check first: an engine without the standard health service answers UNIMPLEMENTED
        # at once, where waiting out the start-up allowance would only slow every run.
        if await ctx.check_health(INFERENCE) == serving \
                or await ctx.wait_health(INFERENCE, serving, within=NOT_SERVING_WAIT_SECONDS):
            return
        status = await ctx.check_health(INFERENCE)
    except grpc.aio.AioRpcError as err:
        if err.code() != grpc.StatusCode.UNIMPLEMENTED:
            return

        async def state():
            with contextlib.suppress(grpc.aio.AioRpcError):
                return (await ctx.control.Health()).state
        # A state that never turns READY is for core.control-health to judge against what
        # Generate does: without the standard health service nothing else tells a paused engine.
        await poll(state, lambda now: now in (None, lifecycle_pb2.HEALTH_STATE_READY,
                                              lifecycle_pb2.HEALTH_STATE_DEGRADED),
                   NOT_SERVING_WAIT_SECONDS, 0.05)
        return
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    raise TargetUnusable(
        f"{ctx.options.target} reports {INFERENCE} {name}: a run needs an engine ready "
        "for work (is it paused, asleep or draining, perhaps left so by an earlier run?)")
