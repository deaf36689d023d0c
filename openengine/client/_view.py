"""What does this engine support? A typed view over its discovery answers.

Discovery is upstream's Control/GetServerInfo and Control/GetModelInfo plus the proposal's
Discovery/GetCapabilities. An engine that serves upstream OpenEngine v1 alone answers
GetCapabilities with UNIMPLEMENTED: the view then knows only what its ServerInfo and ModelInfo
report (`upstream_only`), advertises no profile, and a limit those answers leave out is None.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import grpc

from openengine.contract import catalogue, parse_version
from openengine.validate import DEFAULTS, CapabilityReport, Violation, from_upstream, validate_capabilities


class CapabilityError(Exception):
    """The engine lacks something the caller requires. `missing` names every profile and limit."""

    def __init__(self, missing: list[str]):
        self.missing = list(missing)
        super().__init__("the engine does not provide: " + "; ".join(self.missing))


class NotOpenEngineError(Exception):
    """The server answers `openengine.v1.Control/GetServerInfo` with UNIMPLEMENTED: it serves no
    OpenEngine v1 at all."""

    def __init__(self):
        super().__init__("the server answers openengine.v1.Control/GetServerInfo with UNIMPLEMENTED: "
                         "it is not an OpenEngine v1 server")


class IncompatibleServerError(Exception):
    """The server's `minimum_client_revision` is above the revision this client implements: upstream's
    rule is that such a client rejects the server."""

    def __init__(self, minimum: int, revision: int):
        self.minimum = minimum
        self.revision = revision
        super().__init__(f"the server needs clients of schema revision {minimum} or later; this client "
                         f"implements revision {revision}")


def _discovery_calls(channel, models: bool):
    """The discovery answers: (capabilities or None, server info, model infos by served name).
    A generator of (method, request) calls, run by `drive` or `adrive`."""
    from openengine.v1 import (
        control_service_pb2_grpc, discovery_pb2, discovery_service_pb2_grpc, model_pb2, server_pb2,
    )

    control = control_service_pb2_grpc.ControlStub(channel)
    try:
        info = yield control.GetServerInfo, server_pb2.GetServerInfoRequest()
    except grpc.RpcError as err:
        if err.code() == grpc.StatusCode.UNIMPLEMENTED:
            raise NotOpenEngineError() from None
        raise
    revision = catalogue().schema_revision
    if info.minimum_client_revision > revision:
        raise IncompatibleServerError(info.minimum_client_revision, revision)
    try:
        caps = yield discovery_service_pb2_grpc.DiscoveryStub(channel).GetCapabilities, \
            discovery_pb2.GetCapabilitiesRequest()
    except grpc.RpcError as err:
        if err.code() != grpc.StatusCode.UNIMPLEMENTED:
            raise
        caps = None     # upstream's layout alone
    infos = {}
    for model in info.supported_models if models else ():
        infos[model] = yield control.GetModelInfo, model_pb2.GetModelInfoRequest(model=model)
    return caps, info, infos


def drive(steps, perform):
    """Run a generator of I/O steps (sans-I/O style): each step is performed (`perform(*step)`),
    its answer sent back into the generator and its error thrown in; the generator's return value
    is the result."""
    answer, error = None, None
    while True:
        try:
            step = steps.throw(error) if error else steps.send(answer)
        except StopIteration as done:
            return done.value
        try:
            answer, error = perform(*step), None
        except Exception as err:
            answer, error = None, err


async def adrive(steps, perform):
    """`drive` with a coroutine `perform`."""
    answer, error = None, None
    while True:
        try:
            step = steps.throw(error) if error else steps.send(answer)
        except StopIteration as done:
            return done.value
        try:
            answer, error = await perform(*step), None
        except Exception as err:
            answer, error = None, err


class _Lookup:
    """Shared by the engine-wide and the per-model views."""

    report: CapabilityReport
    _model: str | None = None

    def limit(self, profile: str, limit: str) -> Any:
        """The effective value of `profile`.`limit`: the model's value, the engine-wide value, or
        the registry default when neither is set. None when the profile is not advertised (for an
        upstream-only engine: when its answers do not report the value). Raises KeyError for a
        standard profile or limit the registry does not define."""
        if profile in DEFAULTS and limit not in DEFAULTS[profile]:
            raise KeyError(f"{profile} has no limit {limit!r}")
        if profile.startswith("openengine.") and profile not in DEFAULTS:
            raise KeyError(f"unknown standard profile {profile!r}")
        return self.report.effective(profile, limit, model=self._model)

    def supports(self, profile: str, at_least: str | None = None) -> bool:
        """Is `profile` advertised (for a model view: listed by the model) at a version usable by a
        client written for `at_least` (same major, minor at least as high; REQ-CORE-007)? An
        upstream-only engine advertises none."""
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
        must contain every wanted element). On an upstream-only engine a core limit its answers
        report counts; one they do not report is missing."""
        missing: list[str] = []
        for entry in profiles:
            name, at_least = (entry, None) if isinstance(entry, str) else entry
            if not self.supports(name, at_least):
                missing.append(f"{name}" + (f" >= {at_least}" if at_least else ""))
        for key, wanted in (limits or {}).items():
            profile, _, limit = key.rpartition(".")
            known = self.report.upstream_only and profile == catalogue().core
            if not known and not self.supports(profile):
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

    `capabilities` None means the engine serves upstream's layout alone (`upstream_only`).
    `model_infos` are GetModelInfo answers, as a sequence or by the served name each was asked for.
    """

    def __init__(self, capabilities, *, server_info=None, model_infos: Iterable | Mapping[str, Any] = ()):
        self.capabilities = capabilities
        self.server_info = server_info
        self.model_infos = dict(model_infos) if isinstance(model_infos, Mapping) else list(model_infos)
        if capabilities is None:
            self.report = from_upstream(server_info, self.model_infos)
        else:
            self.report = validate_capabilities(capabilities, server_info=server_info, model_infos=self.model_infos)

    @property
    def upstream_only(self) -> bool:
        """The engine serves upstream OpenEngine v1 alone: no profile, no GetCapabilities."""
        return self.capabilities is None

    @property
    def violations(self) -> tuple[Violation, ...]:
        """What the engine advertises wrongly; a client may still use the view (REQ-CAP-005)."""
        return self.report.violations

    @property
    def revision(self) -> int:
        if self.server_info is not None and self.server_info.capability_revision:
            return self.server_info.capability_revision
        return self.capabilities.revision if self.capabilities is not None else 0

    @property
    def instance_id(self) -> str | None:
        return self.server_info.instance_id if self.server_info is not None else None

    @property
    def profiles(self) -> Mapping[str, tuple[tuple[int, int], ...]]:
        return self.report.profiles

    def model(self, name: str) -> ModelView:
        return ModelView(self.report, name)

    @classmethod
    def fetch(cls, channel, *, models: bool = True, timeout: float | None = 10.0) -> "CapabilityView":
        """Read GetServerInfo and GetCapabilities (and GetModelInfo per supported model) over a
        grpc.Channel. Raises NotOpenEngineError or IncompatibleServerError when the server is
        not one this client may use."""
        caps, info, infos = drive(_discovery_calls(channel, models),
                                  lambda call, request: call(request, timeout=timeout))
        return cls(caps, server_info=info, model_infos=infos)

    @classmethod
    async def afetch(cls, channel, *, models: bool = True, timeout: float | None = 10.0) -> "CapabilityView":
        """`fetch` over a grpc.aio.Channel."""
        caps, info, infos = await adrive(_discovery_calls(channel, models),
                                         lambda call, request: call(request, timeout=timeout))
        return cls(caps, server_info=info, model_infos=infos)
