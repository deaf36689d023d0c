"""Judge what an engine advertises: Capabilities, with ServerInfo and ModelInfo when given.

The per-profile work is in `_tables`; this module adds what spans several
discovery answers (role scope, model coverage, revisions) and the one effective-limit lookup that
clients, preflight checks and the conformance runner share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from openengine.contract import catalogue, combination_problems, role_spelling
from openengine.validate import _tables as tables
from openengine.validate._rules import Severity, Violation, violation


@dataclass(frozen=True)
class ModelReport:
    """One served model: the model-scoped profiles it lists and their effective limits
    (Capabilities.models), and its token limits (ModelInfo)."""

    model: str
    profiles: Mapping[str, tuple[tuple[int, int], ...]]
    limits: Mapping[str, Mapping[str, Any]]      # only the capability messages the model sets
    max_context_length: int = 0                  # ModelInfo's token limits; 0 when not reported
    max_output_tokens: int = 0
    vocab_size: int = 0                          # ModelInfo.vocab_size; 0 when not reported


@dataclass(frozen=True)
class CapabilityReport:
    """The outcome of validating discovery answers: every violation, and what was advertised.

    `upstream_only` marks an engine that serves upstream OpenEngine v1 alone (no
    Discovery/GetCapabilities): it advertises no profile, and the only limits known are the core
    ones its ServerInfo and ModelInfo report (`from_upstream`); a limit they do not report is None."""

    violations: tuple[Violation, ...]
    profiles: Mapping[str, tuple[tuple[int, int], ...]]    # name -> advertised (major, minor) pairs
    limits: Mapping[str, Mapping[str, Any]]                # standard profile -> effective limits
    models: Mapping[str, ModelReport] = field(default_factory=dict)
    revision: int = 0
    upstream_only: bool = False

    @property
    def errors(self) -> list[Violation]:
        return [v for v in self.violations if v.severity is Severity.ERROR]

    @property
    def ok(self) -> bool:
        return not self.errors

    def advertised(self, name: str) -> bool:
        return name in self.profiles

    def effective(self, profile: str, limit: str, *, model: str | None = None) -> Any:
        """A limit's effective value (REQ-CAP-013): the model's message when it sets one, else the
        engine-wide message, else the registry default. None when the profile is not advertised
        (for an upstream-only engine: when its ServerInfo and ModelInfo do not report the value)."""
        if self.upstream_only:
            return self._reported(profile, limit, model)
        if profile not in self.profiles:
            return None
        if model is not None:
            m = self.models.get(model)
            if m is not None and profile in m.limits:
                return m.limits[profile][limit]
        return self.limits[profile][limit]

    def _reported(self, profile: str, limit: str, model: str | None) -> Any:
        m = self.models.get(model) if model is not None else None
        if m is not None and limit in m.limits.get(profile, {}):
            return m.limits[profile][limit]
        return self.limits.get(profile, {}).get(limit)


def _combination_checks(advertised, limits, out: list[Violation]) -> None:
    """Prerequisites (OEV120) and incompatible combinations (OEV121), judged by the contract's one
    `combination_problems`, the same function the reference engine refuses configurations with.
    A prerequisite on the mandatory core is not reported when the core is absent: that absence is
    the one root finding (OEV101), not one more per dependant."""
    cat = catalogue()
    for problem in combination_problems(advertised, limits):
        if problem.prerequisite is not None:
            req = problem.prerequisite
            if req.profile == cat.core and cat.core not in advertised:
                continue
            out.append(violation("OEV120", "profiles", [f"{m}.{n}" for m, n in problem.values],
                                 f"{req.profile} {req.range}", problem.message))
            continue
        first = problem.incompatibility.when[0] if problem.incompatibility.when else None
        owner = cat.profile(first.profile) if first is not None else None
        if owner is not None and owner.capability_field:
            path, value = f"{owner.capability_field}.{first.limit}", list(problem.values)
        else:
            path, value = "profiles", sorted(advertised)
        out.append(violation("OEV121", path, value, "not this combination", problem.message))


def _check(capabilities, out: list[Violation], *, complete: bool = True):
    """Every per-profile check, then the combinations across profiles.
    `complete` false: the limits are only read here, so unset messages' defaults are left out
    (`combination_problems` takes a left-out limit as its default)."""
    advertised, limits = tables.check_capabilities(capabilities, out, complete=complete)
    _combination_checks(advertised, limits, out)
    return advertised, limits


def _server_checks(advertised, server_info, revision: int, out: list[Violation]) -> None:
    role = server_info.engine_role
    role_name = role_spelling(role)
    if role == 0:
        out.append(violation("OEV136", "server_info.engine_role", role_name, "a role",
                             "ServerInfo.engine_role is not set"))
    if not server_info.instance_id:
        out.append(violation("OEV136", "server_info.instance_id", "", "a non-empty id",
                             "ServerInfo.instance_id is empty"))
    if server_info.schema_revision == 0:
        out.append(violation("OEV136", "server_info.schema_revision", 0, ">= 1",
                             "ServerInfo.schema_revision is never zero"))
    if not server_info.schema_release:
        out.append(violation("OEV136", "server_info.schema_release", "", "an immutable release name",
                             "ServerInfo.schema_release is empty"))
    tables.check_role(advertised, role, role_name, out)
    if server_info.schema_revision < catalogue().schema_revision:
        return      # upstream's revision: capability_revision is the proposal's, not upstream's
    if server_info.capability_revision == 0:
        out.append(violation("OEV135", "server_info.capability_revision", 0, ">= 1",
                             "ServerInfo.capability_revision is never zero"))
    elif revision and server_info.capability_revision != revision:
        out.append(violation("OEV135", "revision", revision, str(server_info.capability_revision),
                             f"Capabilities.revision {revision} differs from ServerInfo.capability_revision "
                             f"{server_info.capability_revision}"))


def _model_infos(model_infos) -> dict[str, Any]:
    """Served name -> ModelInfo: a mapping as given (the name each was asked for), or a sequence
    keyed by each answer's served_model_name (its model_id when that is empty)."""
    if isinstance(model_infos, Mapping):
        return dict(model_infos)
    return {info.served_model_name or info.model_id: info for info in model_infos}


def _token_limits(info) -> dict[str, int]:
    if info is None:
        return {}
    return {"max_context_length": info.max_context_length if info.HasField("max_context_length") else 0,
            "max_output_tokens": info.max_output_tokens if info.HasField("max_output_tokens") else 0,
            "vocab_size": info.vocab_size if info.HasField("vocab_size") else 0}


def validate_capabilities(capabilities, *, server_info=None,
                          model_infos: Iterable | Mapping[str, Any] = ()) -> CapabilityReport:
    """Validate a `Capabilities` message, and with `server_info` (ServerInfo) and `model_infos`
    (ModelInfo answers, as a sequence or as served name -> answer) the rules that span them (role
    scope, model-scoped profiles, revisions, agreement of upstream's fields with the core limits).
    Returns every violation, not only the first.

    When `Capabilities.models` covers every model in `server_info.supported_models`, a
    model-scoped profile advertised engine-wide but listed by no model is reported too."""
    out: list[Violation] = []
    advertised, limits = _check(capabilities, out)
    if server_info is not None:
        _server_checks(advertised, server_info, capabilities.revision, out)
        upstream_agreement(limits.get(catalogue().core, {}), server_info, None, "server_info", out)
    infos = _model_infos(model_infos)
    supported = set(server_info.supported_models) if server_info is not None else None
    models: dict[str, ModelReport] = {}
    listed: set[str] = set()
    for i, entry in enumerate(capabilities.models):
        path = f"models[{i}]"
        if entry.model in models or not entry.model or (supported is not None and entry.model not in supported):
            why = ("has no model name" if not entry.model else "repeats a model" if entry.model in models
                   else "names a model ServerInfo.supported_models does not list")
            out.append(violation("OEV137", f"{path}.model", entry.model, "a served model, once", f"{path} {why}"))
        model_advertised, mlimits = tables.check_model_capabilities(entry, path, advertised, out)
        listed.update(model_advertised)
        models[entry.model] = ModelReport(entry.model, {k: tuple(v) for k, v in model_advertised.items()}, mlimits,
                                          **_token_limits(infos.get(entry.model)))
    core_limits = limits.get(catalogue().core, {})
    for i, (name, info) in enumerate(infos.items()):
        if name not in models:
            models[name] = ModelReport(name, {}, {}, **_token_limits(info))
        upstream_agreement(core_limits, None, info, f"model_info[{i}]", out,
                           lists_adapters="openengine.adapters" in models[name].profiles)
    if supported and supported <= {m.model for m in capabilities.models}:
        for name in sorted(tables.MODEL_SCOPED & set(advertised) - listed):
            out.append(violation("OEV134", "profiles", name, "listed by at least one served model",
                                 f"{name} is advertised but no served model lists it"))
    return CapabilityReport(tuple(out), {k: tuple(v) for k, v in advertised.items()}, limits, models,
                            capabilities.revision)


# Upstream's reported fields and the openengine.core limit each states: (where, field path, limit).
# The engine fills them from the same values, so a client reading either view learns the same; an
# engine serving upstream's layout alone is known through these fields only (`from_upstream`).
UPSTREAM_CORE_FIELDS = (
    ("model", "generation.output_logprobs.max_top_n", "max_logprobs"),
    ("model", "generation.prompt_logprobs.max_top_n", "max_logprobs"),
    ("model", "generation.output_logprobs.supported", "output_logprobs"),
    ("model", "generation.prompt_logprobs.supported", "prompt_logprobs"),
    ("model", "generation.max_num_sequences", "max_sequences"),
    ("model", "generation.supports_priority", "priority"),
    ("model", "generation.guided_decoding.modes", "guided_decoding_modes"),
    ("model", "supports_token_ids_input", "token_ids_input"),
    ("server", "capacity.max_running_requests", "max_running_requests"),
    ("server", "capacity.max_batched_tokens", "max_batch_tokens"),
    ("server", "parallelism.pipeline_parallel_size", "pipeline_parallel_size"),
)


def _reported_value(msg, path: str) -> tuple[bool, Any]:
    """(reported, value) of a dotted path: an unset message or optional scalar on the way is not
    reported; a repeated field is reported when its message is."""
    *parents, name = path.split(".")
    for part in parents:
        if not msg.HasField(part):
            return False, None
        msg = getattr(msg, part)
    field_descriptor = msg.DESCRIPTOR.fields_by_name[name]
    if field_descriptor.is_repeated:
        return True, list(getattr(msg, name))
    if field_descriptor.has_presence and not msg.HasField(name):
        return False, None
    return True, getattr(msg, name)


def _guided_spellings(numbers) -> list[str]:
    lim = catalogue().limit(f"{catalogue().core}.guided_decoding_modes")
    spelled = {number: name for name, number in lim.enum_spellings().items()}
    return [spelled[n] for n in numbers if n in spelled]


def _reported(server_info, model_info):
    """(field path, core limit, value) of each of UPSTREAM_CORE_FIELDS the answers report, guided
    decoding modes as registry spellings."""
    for where, path, limit in UPSTREAM_CORE_FIELDS:
        msg = server_info if where == "server" else model_info
        reported, value = _reported_value(msg, path) if msg is not None else (False, None)
        if reported:
            yield path, limit, _guided_spellings(value) if limit == "guided_decoding_modes" else value


def upstream_core_values(server_info=None, model_info=None) -> dict[str, Any]:
    """The openengine.core limits that upstream's ServerInfo and one ModelInfo report, by limit
    name; a limit neither reports is left out."""
    values: dict[str, Any] = {}
    for _, limit, value in _reported(server_info, model_info):
        values.setdefault(limit, value)
    return values


def upstream_agreement(core: Mapping[str, Any], server_info, model_info, path: str, out: list[Violation], *,
                       lists_adapters: bool | None = None) -> None:
    """Upstream's reported fields against the effective core limits (OEV138): the same fact may
    not be stated two ways. A field left unreported says nothing."""
    if not core:
        return
    for field_path, limit, value in _reported(server_info, model_info):
        want = core[limit]
        if limit == "guided_decoding_modes":
            value, want = sorted(value), sorted(want)
        if value != want:
            out.append(violation("OEV138", f"{path}.{field_path}", value, f"{want} (openengine.core.{limit})",
                                 f"{path}.{field_path} is {value!r} but openengine.core.{limit} is {want!r}"))
    if model_info is not None and lists_adapters is not None and model_info.HasField("supports_lora") \
            and model_info.supports_lora != lists_adapters:
        out.append(violation("OEV138", f"{path}.supports_lora", model_info.supports_lora,
                             f"{lists_adapters} (the model {'lists' if lists_adapters else 'does not list'} "
                             "openengine.adapters)",
                             f"{path}.supports_lora is {model_info.supports_lora} but the model "
                             f"{'lists' if lists_adapters else 'does not list'} openengine.adapters"))


def from_upstream(server_info, model_infos: Iterable | Mapping[str, Any] = ()) -> CapabilityReport:
    """What an engine serving upstream OpenEngine v1 alone (GetCapabilities UNIMPLEMENTED) is known
    to support: no profile is advertised, and the core limits are only those its ServerInfo and
    ModelInfo report (per model where ModelInfo states them). ServerInfo's own rules still apply."""
    out: list[Violation] = []
    if server_info is not None:
        _server_checks({}, server_info, 0, out)
    engine = upstream_core_values(server_info, None)
    models = {}
    for name, info in _model_infos(model_infos).items():
        models[name] = ModelReport(name, {}, {catalogue().core: upstream_core_values(None, info)},
                                   **_token_limits(info))
    return CapabilityReport(tuple(out), {}, {catalogue().core: engine}, models, 0, upstream_only=True)


def check_server_info(server_info) -> list[Violation]:
    """The rules a `GetServerInfo` answer keeps on its own (role, instance id, revisions, release);
    those spanning it and the capabilities need both (`validate_capabilities`)."""
    out: list[Violation] = []
    _server_checks({}, server_info, 0, out)
    return out


def check_capabilities(capabilities) -> list[Violation]:
    """Just the violations of one `Capabilities` message: the hot-path entry point."""
    out: list[Violation] = []
    _check(capabilities, out, complete=False)
    return out
