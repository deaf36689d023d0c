"""What a case gets to talk to the engine: channels, deadline-bound stubs, discovery results and
small helpers that several cases share (generation, pausing, limits with their defaults)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib
import itertools
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

import grpc
from google.protobuf import descriptor_pool, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc

from openengine.conformance.cases.base import Failed, Skipped, Unchecked, expect
from openengine.contract import CORE, HEALTH_SERVICE, ProfileInfo, RpcInfo, catalogue
from openengine.v1 import admin_pb2, generation_pb2, model_pb2, server_pb2
from openengine.validate import upstream_core_values, validate_capabilities

Contract = dict[str, ProfileInfo]     # full profile name -> profile, the core first


@functools.lru_cache(maxsize=1)
def load_contract() -> Contract:
    """The contract of the installed bindings (`openengine.v1`), read from the descriptors."""
    profiles = {p.name: p for p in catalogue().profiles}
    # The standard health service is part of the core (the registry lists its two RPCs) but is
    # defined by grpc.health.v1, not by our protos, so it carries no profile option.
    health = health_pb2.DESCRIPTOR.services_by_name["Health"]
    profiles[CORE] = dataclasses.replace(profiles[CORE], rpcs=profiles[CORE].rpcs + tuple(
        RpcInfo(HEALTH_SERVICE, health.methods_by_name[name], CORE, "1.0") for name in ("Check", "Watch")))
    return dict(sorted(profiles.items(), key=lambda kv: (kv[0] != CORE, kv[0])))


def services_of(contract: Contract, profiles) -> list[str]:
    """Full names of the services holding at least one RPC of these profiles, sorted."""
    return sorted({s for name in profiles if name in contract for s in contract[name].services})


# Output tokens of the longest request a case makes; enough for seconds at a few ms per token.
LONG_REQUEST_TOKENS = 100_000


@dataclass(frozen=True)
class Options:
    """How the runner talks to the engine. Every network wait is bounded by one of these."""

    target: str
    rpc_timeout: float = 5.0
    case_timeout: float = 20.0
    max_message_bytes: int = 4 * 1024 * 1024
    admin_target: str | None = None
    admin_token: str | None = None
    admin_limited_token: str | None = None
    shutdown_command: str | None = None
    # Drain (and anything else that leaves the engine unable to serve) runs only when asked; a
    # shutdown command asks for it too, since the engine is gone after the run anyway.
    destructive: bool = False
    # Client certificate, key and CA (PEM files) for an Admin address behind mutual TLS.
    admin_cert: str | None = None
    admin_key: str | None = None
    admin_ca: str | None = None
    # TLS on the main address: the CA that signed its certificate (the system's roots when not
    # given), a client certificate and key when the server asks for one, and the name to check
    # the certificate against when it is not the target's host.
    tls: bool = False
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    server_name: str | None = None

    @property
    def main_tls(self) -> bool:
        """The main address is reached over TLS (--tls, or any option that only TLS uses)."""
        return bool(self.tls or self.ca or self.cert or self.server_name)

    @property
    def admin_tls(self) -> bool:
        return bool(self.admin_ca or self.admin_cert)

    @property
    def admin_elsewhere(self) -> bool:
        """Admin has an address of its own (given with --admin-target)."""
        return bool(self.admin_target) and self.admin_target != self.target


class Deadlined:
    """A stub whose every call carries a deadline (and the given metadata) unless told otherwise.
    `on_call` hears the full name of each RPC called, so a failure can name it."""

    def __init__(self, stub: Any, timeout: float, metadata: tuple, *, service: str, on_call):
        self._stub, self._timeout, self._metadata = stub, timeout, tuple(metadata)
        self._service, self._on_call = service, on_call

    def __getattr__(self, name: str):
        method = getattr(self._stub, name)

        def call(request=None, *, timeout: float | None = None, metadata=None, **kw):
            if request is None:    # the RPC's empty request, from its descriptor
                found = descriptor_pool.Default().FindServiceByName(self._service).methods_by_name[name]
                request = message_factory.GetMessageClass(found.input_type)()
            self._on_call(f"{self._service}/{name}")
            md = self._metadata if metadata is None else tuple(metadata)
            return method(request, timeout=timeout or self._timeout, metadata=md or None, **kw)

        return call


ADMIN_SERVICE = "openengine.v1.Admin"
INFERENCE = "openengine.v1.Inference"


@dataclass
class Discovery:
    """What the engine said about itself. An engine of upstream's layout alone lacks the
    proposal's Discovery/GetCapabilities: then `capabilities` is None and `capabilities_error` says why."""

    server_info: Any = None
    capabilities: Any = None
    models: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    capabilities_error: str | None = None
    capabilities_code: Any = None
    report: Any = None      # the validators' verdict, once a case asked for it


class Context:
    """Shared by every case of one run. Cases must leave the engine as they found it."""

    def __init__(self, options: Options, contract: Contract):
        self.options = options
        self.contract = contract
        self.discovery = Discovery()
        self.forced: set[str] = set()
        self._ids = itertools.count(1)
        self._channels: list[grpc.aio.Channel] = []
        self.last_rpc = ""
        # Whether the main address serves Admin RPCs (found out after discovery).
        self.admin_on_main = True
        # GetLoad failed once (why, when it did): whether the engine is idle is not read again.
        self.load_unreadable: str | bool = False
        # What GetLoad still counted after a bounded wait for idleness, once it never got lower.
        self.idle_floor: tuple[int, int] | None = None
        # The running case's deadline (set by the runner), which `allow` may move.
        self.case_deadline: asyncio.Timeout | None = None

    def allow(self, seconds: float) -> None:
        """Give the running case `seconds` more than its case timeout: an observation whose
        length the engine's own advertised limits set (a window of several watch intervals)
        must fit, or the case could never judge an engine with long intervals."""
        if self.case_deadline is not None and self.case_deadline.when() is not None:
            self.case_deadline.reschedule(self.case_deadline.when() + seconds)

    # channels and stubs
    async def open(self) -> None:
        o = self.options
        self.channel = self.new_channel()
        self.admin_channel = self.new_channel(admin=True) if o.admin_elsewhere else self.channel
        for name in ("inference", "control", "observability", "tasks", "encoder", "sessions"):
            setattr(self, name, self.stub(name, self.channel))
        self.discovery_rpc = self.stub("discovery", self.channel)
        self.health = Deadlined(health_pb2_grpc.HealthStub(self.channel), o.rpc_timeout, (),
                                service=HEALTH_SERVICE, on_call=self._called)
        token_md = (("authorization", f"Bearer {o.admin_token}"),) if o.admin_token else ()
        # Without credentials: on an mTLS admin address that means without a client certificate.
        self.admin_anonymous = self.stub("admin", self.new_channel(admin=True, client_certificate=False)
                                         if o.admin_tls else self.admin_channel)
        self._admin = self.stub("admin", self.admin_channel, token_md)

    def new_channel(self, *, admin: bool = False, client_certificate: bool = True,
                    window_bytes: int | None = None) -> grpc.aio.Channel:
        """A new connection to the main or the admin address (a watcher that must not share flow
        control gets one of its own), over TLS with the PEM files of --ca, --cert, --key (or
        --admin-ca, ...) when the options ask for it; closed with the run."""
        o = self.options
        opts = [("grpc.max_receive_message_length", o.max_message_bytes),
                ("grpc.max_send_message_length", o.max_message_bytes), ("grpc.enable_retries", 0),
                # Do not hide a dead server behind reconnect backoff longer than a deadline.
                ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 1000)]
        if window_bytes is not None:
            opts += [("grpc.http2.lookahead_bytes", window_bytes), ("grpc.http2.bdp_probe", 0)]
        target = (o.admin_target or o.target) if admin else o.target
        if not (o.admin_tls if admin else o.main_tls):
            channel = grpc.aio.insecure_channel(target, options=opts)
        else:
            if o.server_name and not admin:
                opts.append(("grpc.ssl_target_name_override", o.server_name))
            prefix, label = ("admin-", "admin ") if admin else ("", "")

            def pem(kind: str, what: str) -> bytes | None:
                path = getattr(o, prefix.replace("-", "_") + kind)
                if not path or (kind != "ca" and not client_certificate):
                    return None
                try:
                    with open(path, "rb") as fh:
                        return fh.read()
                except OSError as err:
                    raise ValueError(f"{path}: cannot read the {label}{what} (--{prefix}{kind}): "
                                     f"{err.strerror}") from None
            channel = grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(
                pem("ca", "CA certificate"), pem("key", "client key"), pem("cert", "client certificate")),
                options=opts)
        self._channels.append(channel)
        return channel

    def _called(self, full_name: str) -> None:
        self.last_rpc = full_name

    def describe_rpc_error(self, err: grpc.aio.AioRpcError) -> str:
        """A case's unexpected gRPC failure, naming the RPC last called and, for an Admin RPC
        answering UNIMPLEMENTED on the main address, the option that is probably missing."""
        out = str(rpc_error(err, f"an RPC ({self.last_rpc})" if self.last_rpc else "an RPC"))
        if err.code() == grpc.StatusCode.UNIMPLEMENTED and self.last_rpc.startswith(HEALTH_SERVICE):
            out += ("; the engine lacks the standard health service: add grpc.health.v1.Health "
                    "(REQ-HEALTH-001)")
        if err.code() == grpc.StatusCode.UNIMPLEMENTED and self.last_rpc.startswith(ADMIN_SERVICE) \
                and not self.options.admin_elsewhere:
            out += ("; hint: Admin is advertised but not served on the main address: give its own "
                    "address with --admin-target HOST:PORT")
        return out

    async def close(self) -> None:
        for ch in self._channels:
            with contextlib.suppress(Exception):
                await ch.close(grace=None)

    def stub(self, name: str, channel: grpc.aio.Channel, metadata: tuple = ()) -> Deadlined:
        """A deadline-bound stub of openengine.v1's `name` service (`inference`) on `channel`."""
        module = importlib.import_module(f"openengine.v1.{name}_service_pb2_grpc")
        stub = getattr(module, f"{name.capitalize()}Stub")
        return Deadlined(stub(channel), self.options.rpc_timeout, metadata,
                         service=f"openengine.v1.{name.capitalize()}", on_call=self._called)

    def raw_call(self, rpc: RpcInfo, request, *, metadata=None):
        """Call any RPC of the contract by its descriptor (used by the served/absent checks)."""
        ch = self.admin_channel if rpc.service == ADMIN_SERVICE else self.channel
        factory = ch.unary_stream if rpc.server_streaming else ch.unary_unary
        self._called(rpc.full_name)
        multi = factory(rpc.path, request_serializer=rpc.request.SerializeToString,
                        response_deserializer=rpc.response.FromString)
        return multi(request, timeout=self.options.rpc_timeout, metadata=metadata)

    async def discover(self) -> None:
        """Read ServerInfo, every supported model's ModelInfo (Control) and Capabilities
        (Discovery), again. A GetCapabilities that fails leaves `capabilities` None: the cases
        that need it report what the engine lacks."""
        d = Discovery()
        step = "Control/GetServerInfo"
        try:
            d.server_info = await self.control.GetServerInfo()
            for model in d.server_info.supported_models:
                step = f"Control/GetModelInfo({model!r})"
                d.models[model] = await self.control.GetModelInfo(
                    model_pb2.GetModelInfoRequest(model=model))
        except grpc.aio.AioRpcError as err:
            d.error = str(rpc_error(err, step))
        try:
            d.capabilities = await self.discovery_rpc.GetCapabilities()
        except grpc.aio.AioRpcError as err:
            d.capabilities_code = err.code()
            d.capabilities_error = str(rpc_error(err, "Discovery/GetCapabilities"))
        self.discovery = d

    @property
    def has_discovery(self) -> bool:
        """The engine answered GetCapabilities (the proposal's discovery)."""
        return self.discovery.capabilities is not None

    @property
    def prefill(self) -> bool:
        """The engine's role is prefill: each request ends with one prefill_ready, no token."""
        info = self.discovery.server_info
        return info is not None and info.engine_role == server_pb2.ENGINE_ROLE_PREFILL

    def require_decoding(self, *, observable: bool = False) -> None:
        """Cases about generated tokens do not apply to a prefill engine (Skipped); cases that
        need a request running for a while apply, but cannot be observed there (Unchecked)."""
        if self.prefill:
            if observable:
                raise Unchecked("the engine's role is prefill: each request ends with one "
                                "prefill_ready event, so none runs long enough to be observed "
                                "while it runs")
            raise Skipped("the engine's role is prefill: a request ends with one prefill_ready "
                          "event and generates no token")

    def require_capabilities(self) -> Any:
        """The Capabilities message; a case that judges its content cannot run without it."""
        if self.discovery.capabilities is None:
            raise Unchecked(f"no Capabilities to judge: {self.missing_discovery()} "
                            "(see core.discovery.answers)")
        return self.discovery.capabilities

    def missing_discovery(self) -> str:
        """Why Capabilities could not be read, as a migration step when the RPC is absent."""
        d = self.discovery
        if d.capabilities_code == grpc.StatusCode.UNIMPLEMENTED:
            return ("the engine does not serve openengine.v1.Discovery/GetCapabilities "
                    "(UNIMPLEMENTED): add the Discovery service, whose GetCapabilities lists "
                    "openengine.core and every other profile served, with their limits")
        return d.capabilities_error or "GetCapabilities was not read"

    async def locate_admin(self) -> None:
        """Find out whether the main address serves Admin RPCs (REQ-ADMIN-001 lets an engine
        serve them only on an address of its own). The probe carries no credentials and only
        validates, so it changes nothing whatever the engine does with it."""
        if not self.advertised("openengine.admin"):
            return
        stub = self.stub("admin", self.channel)
        try:
            await stub.UpdateConfig(admin_pb2.UpdateConfigRequest(validate_only=True))
            self.admin_on_main = True
        except grpc.aio.AioRpcError as err:
            self.admin_on_main = err.code() != grpc.StatusCode.UNIMPLEMENTED

    # what the engine advertises
    @property
    def server_info(self):
        return self.discovery.server_info

    @property
    def capabilities(self):
        return self.discovery.capabilities

    @property
    def advertised_profiles(self) -> set[str]:
        caps = self.discovery.capabilities
        return {p.name for p in caps.profiles} if caps is not None else set()

    def advertised(self, profile: str) -> bool:
        return profile in self.advertised_profiles

    @property
    def advertised_services(self) -> list[str]:
        """OpenEngine services the engine advertises (the health service itself is not one)."""
        profiles = self.advertised_profiles | {CORE}
        return [s for s in services_of(self.contract, profiles) if s != HEALTH_SERVICE]

    @property
    def main_services(self) -> list[str]:
        """Advertised services served on the main address, so the ones its health reports
        (REQ-HEALTH-002): all of them, except Admin when it answers only on its own address."""
        return [s for s in self.advertised_services
                if s != ADMIN_SERVICE or self.admin_on_main]

    def limit(self, profile: str, name: str, *, model: str | None = None) -> Any:
        """The effective value of a limit (REQ-CAP-013): the model's capability message, else the
        engine-wide one, else, for an engine without Capabilities, what upstream's ModelInfo and
        ServerInfo report of it, else the registry's default."""
        info = self.contract.get(profile)
        spec = info.limit(name) if info is not None else None
        if spec is None:
            raise KeyError(f"{profile} has no limit {name}")
        caps = self.discovery.capabilities
        field_name = info.capability_field
        spelled = {number: text for text, number in spec.enum_spellings().items()}
        if caps is not None and field_name:
            model = model or self.model
            for found in [*(e for e in caps.models if e.model == model), caps]:
                if found.DESCRIPTOR.fields_by_name.get(field_name) and found.HasField(field_name):
                    value = _field_value(getattr(found, field_name), name)
                    if value is not None:
                        # Enum values as the registry spells them (`embed`), as its defaults are.
                        return [spelled.get(v, v) for v in value] if isinstance(value, list) else value
        elif profile == CORE:
            d = self.discovery
            value = upstream_core_values(d.server_info, d.models.get(model or self.model)).get(name)
            if value is not None:
                return value
        default = spec.default
        return list(default) if isinstance(default, (list, tuple)) else default

    def capability_report(self):
        """The validators' verdict on the discovery answers (computed once per discovery)."""
        d = self.discovery
        if d.report is None:
            d.report = validate_capabilities(self.require_capabilities(), server_info=d.server_info,
                                             model_infos=list(d.models.values()))
        return d.report

    @property
    def model(self) -> str:
        models = list(self.server_info.supported_models) if self.server_info else []
        return models[0] if models else ""

    # helpers
    def request_id(self, prefix: str = "conf") -> str:
        return f"{prefix}-{next(self._ids)}"

    def can_admin(self) -> bool:
        """Admin is advertised, reachable where the runner will call it, with credentials."""
        try:
            self.admin()
            return True
        except (Skipped, Unchecked):
            return False

    def admin(self):
        """The admin stub with credentials. Skips the case when Admin is not advertised; leaves it
        unchecked when the runner lacks the credentials or the address to use it."""
        if not self.advertised("openengine.admin") and "openengine.admin" not in self.forced:
            raise Skipped("openengine.admin is not advertised")
        if not self.admin_on_main and not self.options.admin_elsewhere:
            raise Unchecked("Admin is advertised but answers UNIMPLEMENTED on the main address: it "
                            "is served on an address of its own; give it with --admin-target "
                            "HOST:PORT")
        if not self.options.admin_token and not self.options.admin_cert:
            raise Unchecked("no admin credentials (give --admin-token, or --admin-cert and "
                            "--admin-key for an mTLS admin address)")
        return self._admin

    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncIterator[Any]:
        """Pause generation through Admin for the duration of the block, then resume.
        Only from SERVING: pausing an engine found paused would leave it resumed, not as found."""
        admin = self.admin()
        if await self.check_health("openengine.v1.Inference") != health_pb2.HealthCheckResponse.SERVING:
            raise Unchecked("openengine.v1.Inference is not SERVING before pausing; resume the "
                            "engine and rerun")
        await admin.PauseGeneration()
        try:
            yield admin
        finally:
            await admin.ResumeGeneration()
            await self.wait_health("openengine.v1.Inference", health_pb2.HealthCheckResponse.SERVING)

    async def check_health(self, service: str) -> int:
        resp = await self.health.Check(health_pb2.HealthCheckRequest(service=service))
        return resp.status

    async def wait_health(self, service: str, status: int, *, within: float = 2.0) -> bool:
        """Poll Check until `service` reports `status` (state changes need not be instant)."""
        async def check():
            with contextlib.suppress(grpc.aio.AioRpcError):
                return await self.check_health(service)
        return (await poll(check, lambda now: now == status, within))[1]

    async def busy(self) -> tuple[int, int] | None:
        """(running, queued) requests as Control/GetLoad counts them now; None when GetLoad fails
        (whether the engine is idle cannot be seen: GetLoad's own cases report that)."""
        if self.load_unreadable:
            return None
        try:
            info = await self.control.GetLoad()
        except grpc.aio.AioRpcError as err:
            self.load_unreadable = f"Control/GetLoad failed with {status_name(err.code())}"
            return None
        return info.running_requests, info.queued_requests

    async def wait_idle(self, within: float) -> tuple[int, int] | None:
        """Wait, at most `within` seconds, until GetLoad counts no running or queued request.
        None once idle (or when idleness cannot be seen), else the last counts seen. Counts the
        engine never came down from once (`idle_floor`) are taken as its idle: waiting on them
        again before every case would only make the run slow (core.load.back-to-idle fails it)."""
        floor = self.idle_floor

        def idle(counts) -> bool:
            return counts is None or counts == (0, 0) or (
                floor is not None and counts[0] <= floor[0] and counts[1] <= floor[1])
        counts, held = await poll(self.busy, idle, within)
        if not held:
            self.idle_floor = counts
        return None if counts is None or counts == (0, 0) else counts

    def generate_request(self, *, max_tokens: int | None = 8, prompt: str = "conformance says hello",
                         request_id: str | None = None, min_tokens: int | None = None,
                         ignore_eos: bool | None = None, **sampling):
        """A GenerateRequest to the default model; `sampling` sets SamplingParams fields."""
        given = {"max_tokens": max_tokens, "min_tokens": min_tokens, "ignore_eos": ignore_eos}
        stopping = generation_pb2.StoppingOptions(**{k: v for k, v in given.items() if v is not None})
        return generation_pb2.GenerateRequest(
            request_id=request_id or self.request_id("gen"), model=self.model, prompt=prompt,
            sampling=generation_pb2.SamplingParams(**sampling), stopping=stopping)

    async def generate(self, request, *, timeout: float | None = None) -> list:
        """Run one Generate to its end and return every response message. A stream that does not
        end in time fails the case with what had arrived by then, against what was asked."""
        call = self.inference.Generate(request, timeout=timeout)
        got: list = []
        # An output far past max_tokens will not stop by itself: say so now, not at the deadline.
        asked = request.stopping.max_tokens if request.stopping.HasField("max_tokens") else None
        runaway = None if asked is None else 2 * asked + 16
        counts: dict[int, int] = {}
        try:
            async for msg in call:
                got.append(msg)
                if runaway is not None and msg.HasField("token"):
                    index = msg.token.output_index
                    counts[index] = counts.get(index, 0) + len(msg.token.tokens)
                    if counts[index] > runaway:
                        call.cancel()
                        raise Failed(f"asked max_tokens {asked}; output {index} had sent "
                                     f"{counts[index]} tokens and the stream had not ended "
                                     "(REQ-CORE-019.1)")
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED or not got:
                raise
            raise Failed(overdue(request, got, timeout or self.options.rpc_timeout)) from None
        except asyncio.CancelledError:
            call.cancel()
            raise
        return got

    def long_generation_tokens(self) -> int:
        """The most output tokens a request to the default model may ask for (its
        ModelInfo.max_output_tokens, bounded so a runaway case stays short)."""
        info = self.discovery.models.get(self.model)
        out = info.max_output_tokens if info is not None and info.HasField("max_output_tokens") else 0
        return max(1, min(out or LONG_REQUEST_TOKENS, LONG_REQUEST_TOKENS))

    @contextlib.asynccontextmanager
    async def running(self, prompt: str = "conformance keeps this request running") -> AsyncIterator[Any]:
        """A long request seen running (its first message ends nothing) for the block; then cancelled."""
        request = self.long_request(prompt=prompt)
        call = self.inference.Generate(request, timeout=self.options.case_timeout + 5)
        try:
            expect_running(await call.read(), request)
            yield call
        finally:
            call.cancel()

    def long_request(self, *, prompt: str = "conformance keeps this request running", **sampling):
        """A request that runs as long as the model allows: `ignore_eos` and `min_tokens` equal to
        `max_tokens`, so it cannot end early on an EOS token (its length in seconds is the engine's)."""
        tokens = self.long_generation_tokens()
        return self.generate_request(max_tokens=tokens, min_tokens=tokens, ignore_eos=True,
                                     prompt=prompt, **sampling)


def profile_versions(caps) -> list[tuple[str, int, int]]:
    """(name, major, minor) of every profile a Capabilities message (or a model's entry) lists."""
    return sorted((p.name, p.major, p.minor) for p in caps.profiles)


def _field_value(message, name: str) -> Any:
    """A limit field of a capability message: None when it is not set."""
    fd = message.DESCRIPTOR.fields_by_name.get(name)
    if fd is None:
        return None
    if fd.is_repeated:
        values = list(getattr(message, name))
        return values if values else None
    return getattr(message, name) if message.HasField(name) else None


def expect_running(first, request) -> None:
    """A long request (ignore_eos, min_tokens = max_tokens) that ends at its first message broke
    the contract, whatever the ending: say how it ended."""
    if first is grpc.aio.EOF:
        raise Failed("a long request's stream ended with OK before its first message: an accepted "
                     "stream ends with a finished or error event (REQ-CORE-009.1)")
    if first.HasField("error"):
        raise Failed(f"a long request within every limit ended at once with an EngineError "
                     f"(code {first.error.code}: {first.error.message!r})")
    if first.HasField("finished") or first.HasField("prefill_ready"):
        raise Failed(f"a request with ignore_eos and min_tokens {request.stopping.min_tokens} ended "
                     f"with its first event ({first.WhichOneof('event')}), before any token "
                     "(REQ-CORE-019.2)")


def overdue(request, got: list, seconds: float) -> str:
    """What a Generate stream that did not end in time had delivered, against what it asked."""
    tokens = sum(len(m.token.tokens) for m in got if m.HasField("token"))
    stopping = request.stopping
    asked = f"asked max_tokens {stopping.max_tokens}" if stopping.HasField("max_tokens") \
        else "asked no max_tokens"
    return (f"{asked}; {tokens} tokens arrived and the stream had not ended after {seconds:g} s")


class Reader:
    """Bounded reads of a server stream. A timed-out read is kept pending for the next call
    instead of being cancelled, because cancelling a pending `read()` cancels the whole RPC."""

    def __init__(self, call, rpc: str = ""):
        self.call, self.rpc = call, rpc
        self._pending: asyncio.Future | None = None
        self.received: list = []      # what `next` read

    async def next(self, timeout: float, ended=None):
        """The next message of a stream the engine must keep open, or None when nothing came in
        time. A failed call fails the case, and so does the stream's end, said by `ended(code)`."""
        try:
            msg = await self.read(timeout)
        except grpc.aio.AioRpcError as err:
            raise rpc_error(err, self.rpc) from None
        if msg is grpc.aio.EOF:
            code = await self.call.code()
            raise Failed(ended(code) if ended else f"{self.rpc} ended with {status_name(code)}")
        if msg is not None:
            self.received.append(msg)
        return msg

    async def until(self, holds, timeout: float, what: str):
        """The first message (read with `next`) that `holds`; the case fails without one in time."""
        end = asyncio.get_running_loop().time() + timeout
        while (left := end - asyncio.get_running_loop().time()) > 0:
            msg = await self.next(left)
            if msg is not None and holds(msg):
                return msg
        raise Failed(f"{self.rpc} sent no {what} within {timeout:g} s")

    async def read(self, timeout: float):
        """The next message, `grpc.aio.EOF` at the end, or None when nothing came in time."""
        if self._pending is None:
            self._pending = asyncio.ensure_future(self.call.read())
        done, _ = await asyncio.wait({self._pending}, timeout=max(0.0, timeout))
        if not done:
            return None
        task, self._pending = self._pending, None
        return task.result()

    def cancel(self) -> None:
        self.call.cancel()
        if self._pending is not None:
            cancel_or_reap(self._pending)
            self._pending = None


async def poll(read, holds, within: float, every: float = 0.02):
    """Await `read()` until `holds` its value or `within` seconds pass: (the last value, whether
    it held)."""
    end = asyncio.get_running_loop().time() + within
    while True:
        value = await read()
        if holds(value) or asyncio.get_running_loop().time() >= end:
            return value, holds(value)
        await asyncio.sleep(every)


def cancel_or_reap(task: asyncio.Future) -> None:
    """Cancel a task that is still running, and mark the outcome of one that already ended as
    seen, so an exception nobody awaits is not printed by asyncio when the task is collected."""
    if task.done():
        if not task.cancelled():
            task.exception()
    else:
        task.cancel()


async def together(*awaitables):
    """Await several things at once and return their results in order. When one fails, the
    others are cancelled and awaited before its exception is raised, so no task is left running
    or holding an exception nobody reads (asyncio.gather leaves the others running)."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        failed = next((t for t in tasks if t.done() and not t.cancelled() and t.exception()), None)
        if failed is not None or any(not t.done() for t in tasks):
            for t in tasks:
                cancel_or_reap(t)
            await asyncio.wait(tasks)
            for t in tasks:
                cancel_or_reap(t)
    if failed is not None:
        raise failed.exception()
    return [t.result() for t in tasks]


async def read_rest(call) -> list:
    """Every remaining message of a stream already read with `read()` (grpc.aio does not allow
    mixing `read()` and iteration on one call)."""
    out = []
    while True:
        msg = await call.read()
        if msg is grpc.aio.EOF:
            return out
        out.append(msg)


def status_name(code: Any) -> str:
    return getattr(code, "name", str(code))


async def refusal(call, codes, what: str) -> str | None:
    """Why `call` (an RPC, or `ctx.generate`) was not refused with one of `codes`, or None."""
    try:
        got = await call
    except grpc.aio.AioRpcError as err:
        if err.code() in codes:
            return None
        return f"{what} failed with {status_name(err.code())}, not " + " or ".join(c.name for c in codes)
    return f"{what} was accepted" + (f" ({len(got)} messages)" if isinstance(got, list) else "")


async def expect_refused(call, codes, what: str) -> None:
    problem = await refusal(call, codes, what)
    expect(problem is None, problem or "")


def rpc_error(err: grpc.aio.AioRpcError, what: str) -> Failed:
    """Turn an unexpected gRPC failure into a clear case failure."""
    details = err.details() or ""
    return Failed(f"{what} failed with {status_name(err.code())}" + (f": {details}" if details else ""))
