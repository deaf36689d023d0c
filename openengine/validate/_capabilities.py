"""Judge what an engine advertises: Capabilities, with EngineInfo and ModelInfo when given.

The per-profile work is the table interpreter in `_tables`; this module adds what spans several
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
    """One served model: the model-scoped profiles it lists and their effective limits."""

    model: str
    profiles: Mapping[str, tuple[tuple[int, int], ...]]
    limits: Mapping[str, Mapping[str, Any]]      # only the capability messages the model sets
    max_context_tokens: int = 0                  # ModelInfo's token limits; 0 when not reported
    max_output_tokens: int = 0
    vocab_size: int = 0                          # TokenizerInfo.vocab_size; 0 when not reported


@dataclass(frozen=True)
class CapabilityReport:
    """The outcome of validating discovery answers: every violation, and what was advertised."""

    violations: tuple[Violation, ...]
    profiles: Mapping[str, tuple[tuple[int, int], ...]]    # name -> advertised (major, minor) pairs
    limits: Mapping[str, Mapping[str, Any]]                # standard profile -> effective limits
    models: Mapping[str, ModelReport] = field(default_factory=dict)
    revision: int = 0

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
        engine-wide message, else the registry default. None when the profile is not advertised."""
        if profile not in self.profiles:
            return None
        if model is not None:
            m = self.models.get(model)
            if m is not None and profile in m.limits:
                return m.limits[profile][limit]
        return self.limits[profile][limit]


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
    """Every per-profile check of the table interpreter, then the combinations across profiles.
    `complete` false: the limits are only read here, so unset messages' defaults are left out
    (`combination_problems` takes a left-out limit as its default)."""
    advertised, limits = tables.check_capabilities(capabilities, out, complete=complete)
    _combination_checks(advertised, limits, out)
    return advertised, limits


def _engine_checks(advertised, engine_info, revision: int, out: list[Violation]) -> None:
    role = engine_info.role
    role_name = role_spelling(role)
    if role == 0:
        out.append(violation("OEV136", "engine_info.role", role_name, "a role", "EngineInfo.role is not set"))
    if not engine_info.instance_id:
        out.append(violation("OEV136", "engine_info.instance_id", "", "a non-empty id",
                             "EngineInfo.instance_id is empty"))
    tables.check_role(advertised, role, role_name, out)
    if engine_info.capability_revision == 0:
        out.append(violation("OEV135", "engine_info.capability_revision", 0, ">= 1",
                             "EngineInfo.capability_revision is never zero"))
    elif revision and engine_info.capability_revision != revision:
        out.append(violation("OEV135", "revision", revision, str(engine_info.capability_revision),
                             f"Capabilities.revision {revision} differs from EngineInfo.capability_revision "
                             f"{engine_info.capability_revision}"))


def validate_capabilities(capabilities, *, engine_info=None, model_infos: Iterable = ()) -> CapabilityReport:
    """Validate a `Capabilities` message, and with `engine_info` / `model_infos` the rules that span
    them (role scope, model-scoped profiles, revisions). Returns every violation, not only the first.

    When `model_infos` covers every model in `engine_info.served_models`, a model-scoped profile
    advertised engine-wide but listed by no model is reported too."""
    out: list[Violation] = []
    advertised, limits = _check(capabilities, out)
    if engine_info is not None:
        _engine_checks(advertised, engine_info, capabilities.revision, out)
    models: dict[str, ModelReport] = {}
    listed: set[str] = set()
    for i, info in enumerate(model_infos):
        path = f"model_info[{i}].capabilities"
        model_advertised, mlimits = tables.check_model_capabilities(info.capabilities, path, advertised, out)
        listed.update(model_advertised)
        models[info.model] = ModelReport(info.model, {k: tuple(v) for k, v in model_advertised.items()}, mlimits,
                                         info.max_context_tokens, info.max_output_tokens,
                                         info.tokenizer.vocab_size if info.HasField("tokenizer") else 0)
    if engine_info is not None and model_infos and engine_info.served_models \
            and set(engine_info.served_models) <= set(models):
        for name in sorted(tables.MODEL_SCOPED & set(advertised) - listed):
            out.append(violation("OEV134", "profiles", name, "listed by at least one served model",
                                 f"{name} is advertised but no served model lists it"))
    return CapabilityReport(tuple(out), {k: tuple(v) for k, v in advertised.items()}, limits, models,
                            capabilities.revision)


def check_engine_info(engine_info) -> list[Violation]:
    """The rules a `GetEngineInfo` answer keeps on its own (role, instance id, capability
    revision); those spanning it and the capabilities need both (`validate_capabilities`)."""
    out: list[Violation] = []
    _engine_checks({}, engine_info, 0, out)
    return out


def check_model_info(model_info, path: str = "capabilities") -> list[Violation]:
    """The rules a `GetModelInfo` answer keeps on its own: its model-scoped capability messages,
    judged against the profiles the model lists (whether the engine advertises those needs its
    `Capabilities`: `validate_capabilities(model_infos=...)`)."""
    out: list[Violation] = []
    listed = {p.name for p in model_info.capabilities.profiles}
    tables.check_model_capabilities(model_info.capabilities, path, listed, out)
    return out


def check_capabilities(capabilities) -> list[Violation]:
    """Just the violations of one `Capabilities` message: the hot-path entry point."""
    out: list[Violation] = []
    _check(capabilities, out, complete=False)
    return out


def effective_limits(capabilities) -> dict[str, dict[str, Any]]:
    """Effective limits of every standard profile in `capabilities` (defaults for what is unset),
    whether or not the profile is advertised; violations are ignored."""
    return tables.check_capabilities(capabilities, [])[1]
