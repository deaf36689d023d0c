"""What does this engine support? A typed view over its discovery answers."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import grpc

from openengine.aliases import ALIASES
from openengine.contract import parse_version
from openengine.validate import DEFAULTS, CapabilityReport, Violation, validate_capabilities


class CapabilityError(Exception):
    """The engine lacks something the caller requires. `missing` names every profile and limit."""

    def __init__(self, missing: list[str]):
        self.missing = list(missing)
        super().__init__("the engine does not provide: " + "; ".join(self.missing))


class EarlierLayoutError(Exception):
    """The server does not answer `Discovery/GetCapabilities`: it speaks an earlier layout.

    `service` is the compatibility alias it was found to serve (`openengine.v1.Control`,
    `openengine.v1.OpenEngine`) and `revision` that layout's schema revision, or both None when
    no known earlier layout answered either (REQ-ALIAS-004)."""

    def __init__(self, service: str | None, revision: int | None):
        self.service = service
        self.revision = revision
        if service is None:
            text = ("the server answers openengine.v1.Discovery/GetCapabilities with UNIMPLEMENTED and "
                    "serves no known earlier OpenEngine layout: it is not an OpenEngine server, or one "
                    "older than schema revision 2")
        else:
            text = (f"the server speaks the earlier OpenEngine layout of schema revision {revision} "
                    f"({service}), not the v1 services: openengine.v1.Discovery/GetCapabilities answers "
                    f"UNIMPLEMENTED. Use a client of that revision, or upgrade the server")
        super().__init__(text)


def _alias_health_call(channel, alias):
    """The alias's own Health method and an empty request: a call without side effects, for
    servers without standard health. Works on grpc and grpc.aio channels alike."""
    from google.protobuf import message_factory

    method = alias.descriptor.methods_by_name["Health"]
    call = channel.unary_unary(f"/{alias.service}/Health",
                               request_serializer=lambda m: m.SerializeToString(),
                               response_deserializer=message_factory.GetMessageClass(method.output_type).FromString)
    return call, message_factory.GetMessageClass(method.input_type)()


def _earlier_layout_calls(channel):
    """The calls that find which earlier layout a server speaks (see `_drive`); returns the error."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    health = health_pb2_grpc.HealthStub(channel)
    # Newest first: a server serving several earlier layouts is reported by its newest.
    for alias in sorted(ALIASES.values(), key=lambda a: -a.revision):
        found = EarlierLayoutError(alias.service, alias.revision)
        try:
            yield health.Check, health_pb2.HealthCheckRequest(service=alias.service)
            return found
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.UNIMPLEMENTED:
                continue  # NOT_FOUND: health knows the server and says this alias is not served
        try:
            yield _alias_health_call(channel, alias)
            return found
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.UNIMPLEMENTED:
                return found
    return EarlierLayoutError(None, None)


def _discovery_calls(channel, models: bool):
    """The discovery answers: (capabilities, engine info, model infos)."""
    from openengine.v1 import discovery_pb2, discovery_service_pb2_grpc

    stub = discovery_service_pb2_grpc.DiscoveryStub(channel)
    try:
        caps = yield stub.GetCapabilities, discovery_pb2.GetCapabilitiesRequest()
    except grpc.RpcError as err:
        if err.code() != grpc.StatusCode.UNIMPLEMENTED:
            raise
        raise (yield from _earlier_layout_calls(channel)) from None
    info = yield stub.GetEngineInfo, discovery_pb2.GetEngineInfoRequest()
    infos = []
    for model in info.served_models if models else ():
        infos.append((yield stub.GetModelInfo, discovery_pb2.GetModelInfoRequest(model=model)))
    return caps, info, infos


def _drive(calls, timeout):
    """Run a generator of (method, request) calls over a grpc.Channel: each answer is sent back
    into it, each RpcError thrown into it; its return value is the result."""
    answer, error = None, None
    while True:
        try:
            method, request = calls.throw(error) if error else calls.send(answer)
        except StopIteration as done:
            return done.value
        try:
            answer, error = method(request, timeout=timeout), None
        except grpc.RpcError as err:
            answer, error = None, err


async def _adrive(calls, timeout):
    """`_drive` over a grpc.aio.Channel."""
    answer, error = None, None
    while True:
        try:
            method, request = calls.throw(error) if error else calls.send(answer)
        except StopIteration as done:
            return done.value
        try:
            answer, error = await method(request, timeout=timeout), None
        except grpc.RpcError as err:
            answer, error = None, err


class _Lookup:
    """Shared by the engine-wide and the per-model views."""

    report: CapabilityReport
    _model: str | None = None

    def limit(self, profile: str, limit: str) -> Any:
        """The effective value of `profile`.`limit`: the model's value, the engine-wide value, or
        the registry default when neither is set. None when the profile is not advertised.
        Raises KeyError for a standard profile or limit the registry does not define."""
        if profile in DEFAULTS and limit not in DEFAULTS[profile]:
            raise KeyError(f"{profile} has no limit {limit!r}")
        if profile.startswith("openengine.") and profile not in DEFAULTS:
            raise KeyError(f"unknown standard profile {profile!r}")
        return self.report.effective(profile, limit, model=self._model)

    def supports(self, profile: str, at_least: str | None = None) -> bool:
        """Is `profile` advertised (for a model view: listed by the model) at a version usable by a
        client written for `at_least` (same major, minor at least as high; REQ-CORE-007)?"""
        versions = self._versions(profile)
        if at_least is None:
            return bool(versions)
        want = parse_version(str(at_least))
        return any(major == want[0] and minor >= want[1] for major, minor in versions)

    def _versions(self, profile: str) -> tuple[tuple[int, int], ...]:
        return self.report.profiles.get(profile, ())

    def require(self, *profiles: str | tuple[str, str], limits: Mapping[str, Any] | None = None) -> None:
        """Raise CapabilityError naming everything missing: profiles (a name, or (name, at_least))
        and limits (`"profile.limit": wanted`; a number must be reached, a bool must be true, a list
        must contain every wanted element)."""
        missing: list[str] = []
        for entry in profiles:
            name, at_least = (entry, None) if isinstance(entry, str) else entry
            if not self.supports(name, at_least):
                missing.append(f"{name}" + (f" >= {at_least}" if at_least else ""))
        for key, wanted in (limits or {}).items():
            profile, _, limit = key.rpartition(".")
            if not self.supports(profile):
                missing.append(f"{key} (profile {profile} not advertised)")
                continue
            actual = self.limit(profile, limit)
            if isinstance(wanted, bool):
                ok = actual is wanted
            elif isinstance(wanted, (int, float)):
                ok = isinstance(actual, (int, float)) and actual >= wanted
            elif isinstance(wanted, (list, tuple, set, frozenset)):
                ok = set(wanted) <= set(actual or ())
            else:
                ok = actual == wanted
            if not ok:
                missing.append(f"{key} = {wanted!r} (engine: {actual!r})")
        if missing:
            raise CapabilityError(missing)


class ModelView(_Lookup):
    """Capabilities as they apply to requests for one model (REQ-CAP-013)."""

    def __init__(self, report: CapabilityReport, model: str):
        self.report = report
        self._model = model

    @property
    def name(self) -> str:
        return self._model or ""

    def _versions(self, profile: str):
        from openengine.validate import MODEL_SCOPED

        if profile in MODEL_SCOPED:
            m = self.report.models.get(self._model)
            return m.profiles.get(profile, ()) if m is not None else ()
        return self.report.profiles.get(profile, ())


class CapabilityView(_Lookup):
    """An engine's capabilities, validated, with defaults applied.

        view = CapabilityView.fetch(channel)
        view.supports("openengine.kv", at_least="1.0")
        view.limit("openengine.adapters", "max_loras")
        view.model("llama").limit("openengine.tasks", "max_inputs_per_request")
        view.require("openengine.load", limits={"openengine.core.max_logprobs": 5})
    """

    def __init__(self, capabilities, *, engine_info=None, model_infos: Iterable = ()):
        self.capabilities = capabilities
        self.engine_info = engine_info
        self.model_infos = list(model_infos)
        self.report = validate_capabilities(capabilities, engine_info=engine_info, model_infos=self.model_infos)

    @property
    def violations(self) -> tuple[Violation, ...]:
        """What the engine advertises wrongly; a client may still use the view (REQ-CAP-005)."""
        return self.report.violations

    @property
    def revision(self) -> int:
        if self.engine_info is not None and self.engine_info.capability_revision:
            return self.engine_info.capability_revision
        return self.capabilities.revision

    @property
    def instance_id(self) -> str | None:
        return self.engine_info.instance_id if self.engine_info is not None else None

    @property
    def profiles(self) -> Mapping[str, tuple[tuple[int, int], ...]]:
        return self.report.profiles

    def model(self, name: str) -> ModelView:
        return ModelView(self.report, name)

    @classmethod
    def fetch(cls, channel, *, models: bool = True, timeout: float | None = 10.0) -> "CapabilityView":
        """Read GetCapabilities and GetEngineInfo (and GetModelInfo per served model) over a
        grpc.Channel."""
        caps, info, infos = _drive(_discovery_calls(channel, models), timeout)
        return cls(caps, engine_info=info, model_infos=infos)

    @classmethod
    async def afetch(cls, channel, *, models: bool = True, timeout: float | None = 10.0) -> "CapabilityView":
        """`fetch` over a grpc.aio.Channel."""
        caps, info, infos = await _adrive(_discovery_calls(channel, models), timeout)
        return cls(caps, engine_info=info, model_infos=infos)
