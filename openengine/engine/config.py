"""How a reference engine is configured: role, profiles to advertise, limit values, served models,
pacing and the admin guard. A configuration file is checked as it is read (`load_config_file`:
every problem at file:line:column); which profiles can be served together, and each limit's type
and range, the SDK judges when the engine starts (`openengine.serve.CannotServe`)."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from openengine.contractkit.locations import Loc
from openengine.contractkit.yamlsource import SourceError, SourceFile, YMap, YScalar, YSeq, read_file
from openengine.contract import Catalogue, catalogue, role_numbers
from openengine.serve import AdminAccess, CannotServe, ConnectionPolicy

ROLE_NAMES = role_numbers()

# Values the reference engine runs with unless configured otherwise. They are the engine's own
# choices (which features the stand-in model offers, sized so that load moves in a demo), not a
# copy of the registry: a limit missing here takes its registry default from the descriptors.
REFERENCE_LIMITS: dict[str, dict[str, Any]] = {
    "openengine.core": {
        "max_logprobs": 5, "max_sequences": 4, "guided_decoding_modes": ["json_object", "choice"],
        "output_logprobs": True, "min_p": True, "prompt_logprobs": True, "priority": True,
        "max_running_requests": 8, "max_batch_tokens": 8192,
        # A bounded queue: beyond it the SDK refuses new work as retryable RESOURCE_EXHAUSTED.
        "max_queued_requests": 64,
    },
    "openengine.load": {"change_driven": True, "per_rank": True},
    "openengine.kv": {"kv_transfer_backends": ["nixl", "mooncake"], "total_kv_blocks": 4096,
                      "event_replay": True, "event_buffer_size": 1024},
    "openengine.adapters": {"max_loras": 2, "max_cpu_loras": 4, "max_lora_rank": 64},
    "openengine.admin": {"pause_modes": ["abort", "wait", "keep"], "max_sleep_level": 2,
                         "wake_tags": ["weights", "kv_cache"]},
    "openengine.tasks": {"supported_tasks": ["embed", "classify", "score"], "embedding_size": 32,
                         "matryoshka": True},
    "openengine.encoder": {"modalities": ["image", "audio", "video"], "encoder_cache_tokens": 65536},
    "openengine.sessions": {"max_sessions": 16},
    "openengine.runtime-events": {"event_kinds": ["capability_revision_changed", "state_changed",
                                                  "adapter_loaded", "adapter_unloaded"]},
}


class ConfigError(CannotServe):
    """The configuration cannot be served: what the engine itself judges; `problems` names each reason."""


@dataclass(frozen=True)
class ModelConfig:
    """One served model. `profiles` names the model-scoped profiles it supports (None: every
    model-scoped profile the engine enables); `limits` narrows their limits for this model only."""

    name: str = "reference-byte-model"
    max_context_tokens: int = 4096
    max_output_tokens: int = 256
    profiles: tuple[str, ...] | None = None
    limits: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineConfig:
    host: str = "127.0.0.1"
    port: int = 50051
    role: str = "aggregated"
    # Profiles to advertise (short or full names), or "all": every one the SDK can serve.
    profiles: tuple[str, ...] = ("all",)
    # Limit values per profile (full or short profile name -> limit name -> value).
    limits: dict[str, dict[str, Any]] = field(default_factory=dict)
    model: ModelConfig = ModelConfig()
    # Several served models; when empty the engine serves `model` alone. The first is the default
    # model (the one a request with an empty `model` gets).
    models: tuple[ModelConfig, ...] = ()
    token_delay_ms: float = 5.0
    instance_id: str | None = None
    data_parallel_size: int = 1
    # Where Admin is served and how it is guarded: the SDK's own settings.
    admin: AdminAccess = AdminAccess()
    # How long connections are kept and how many calls may wait: the SDK's own settings.
    connections: ConnectionPolicy = ConnectionPolicy()

    @property
    def served_models(self) -> tuple[ModelConfig, ...]:
        return tuple(self.models) or (self.model,)


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON configuration file into a plain mapping, with the located loader the
    registry uses: a syntax error, a key the engine does not know (with the nearest known key), a
    value of the wrong type, or a profile, limit or role the contract does not know is reported as file:line:column, what is wrong and how to fix it."""
    shown = str(path)
    try:
        source = read_file(path, shown)
    except SourceError as err:
        where = f"{err.path}:{err.loc.line}:{err.loc.column}" if err.loc.line else err.path
        hint = "pass the path of an engine configuration (YAML or JSON)" if err.message == "no such file" \
            else err.hint
        raise ConfigError([f"{where}: {err.message}" + (f" (hint: {hint})" if hint else "")]) from None
    problems = [f"{shown}:{p.loc.line}:{p.loc.column}: {p.message} (hint: {p.hint})" for p in file_problems(source)]
    if problems:
        raise ConfigError(problems)
    return source.root.plain()


@dataclass(frozen=True)
class FileProblem:
    loc: Loc
    message: str
    hint: str


def file_problems(source: SourceFile, cat: Catalogue | None = None) -> list[FileProblem]:
    """Every way a configuration file breaks the settings `config_from_mapping` takes (their
    types are the fields' of EngineConfig, AdminAccess and ModelConfig) or names what the compiled
    contract does not define (profiles, their limits, roles), each at the key or value concerned."""
    cat = cat or catalogue()
    out = [FileProblem(again, f"duplicate key {key!r} (first at line {first.line})", "keep one of them")
           for key, again, first in source.walk_duplicates()]
    root = source.root
    if not isinstance(root, YMap):
        return out + [FileProblem(root.loc, "(document): the configuration must be a mapping of settings",
                                  "write `key: value` lines, e.g. `profiles: [load]`")]
    if "model" in root.entries and "models" in root.entries:
        out.append(FileProblem(root.key_loc("models"), "(document): both model and models are set",
                               "set either model (one model) or models (a list), not both"))
    out += _mapping_problems(root, EngineConfig, "(document)", cat)
    return out


def _mapping_problems(node: YMap, cls: type, where: str, cat: Catalogue) -> list[FileProblem]:
    """A mapping of `cls`'s settings: its keys are the fields' names."""
    import difflib

    hints = typing.get_type_hints(cls)
    known = sorted(f.name for f in fields(cls))
    out = []
    for key, value in node.entries.items():
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            out.append(FileProblem(node.key_loc(key), f"{where}: unknown key {key!r}",
                                   (f"did you mean {close[0]!r}? " if close else "") + f"known keys: {', '.join(known)}"))
            continue
        path = key if where == "(document)" else f"{where}.{key}"
        out += _value_problems(value, hints[key], path, key, cat)
    return out


def _value_problems(node, kind, where: str, name: str, cat: Catalogue) -> list[FileProblem]:
    """`node` against the type `kind` of the setting `name`."""
    args = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        if isinstance(node, YScalar) and node.value is None and type(None) in args:
            return []
        kind = next(a for a in args if a is not type(None))
        args = typing.get_args(kind)
    if is_dataclass(kind):
        if not isinstance(node, YMap):
            return [FileProblem(node.loc, f"{where}: must be a mapping", f"write the {name} settings as `key: value`")]
        return _mapping_problems(node, kind, where, cat)
    if name == "limits":
        return _limits_problems(node, where, cat)
    if typing.get_origin(kind) is tuple and is_dataclass(args[0]):
        if not isinstance(node, YSeq) or not node.items:
            return [FileProblem(node.loc, f"{where}: must be a non-empty list", f"write one entry per {name[:-1]}")]
        return [p for i, item in enumerate(node.items) for p in _value_problems(item, args[0], f"{where}[{i}]", name, cat)]
    if typing.get_origin(kind) is tuple:
        return _profile_names_problems(node, where, cat)
    value = node.value if isinstance(node, YScalar) else node
    wanted = {str: "a string", int: "an integer", float: "a number"}[kind]
    fits = isinstance(value, str) if kind is str else \
        isinstance(value, (int, float) if kind is float else int) and not isinstance(value, bool)
    if not fits:
        return [FileProblem(node.loc, f"{where}: {value!r} is not {wanted}", f"write {wanted}")]
    if name == "port" and not 0 <= value <= 65535:
        return [FileProblem(node.loc, f"{where}: {value} is not a port", "use 0 (a free port) to 65535")]
    if name == "role" and value not in ROLE_NAMES:
        return [FileProblem(node.loc, f"{where}: unknown role {value!r}", f"use one of: {', '.join(ROLE_NAMES)}")]
    return []


def _profile_names_problems(node, where: str, cat: Catalogue) -> list[FileProblem]:
    """A list of profile names (or one comma-separated string): the only tuple settings."""
    items = node.items if isinstance(node, YSeq) else [node]
    out = []
    for item in items:
        if not isinstance(item, YScalar) or not isinstance(item.value, str):
            out.append(FileProblem(item.loc, f"{where}: must be names", "write a list of names or one "
                                                                         "comma-separated string"))
            continue
        for spelled in (n.strip() for n in item.value.split(",") if n.strip()):
            if spelled != "all" and cat.lookup(spelled) is None:
                out.append(FileProblem(item.loc, f"{where}: unknown profile {spelled!r}",
                                       f"use short or full names of: {', '.join(p.short_name for p in cat.profiles)}"))
    return out


def _limits_problems(node, where: str, cat: Catalogue) -> list[FileProblem]:
    """profile -> limit -> value, each judged by the limit's type and range in the contract."""
    if isinstance(node, YScalar) and node.value is None:
        return []
    if not isinstance(node, YMap):
        return [FileProblem(node.loc, f"{where}: must map profile names to their limits",
                            "write e.g. `core: {max_sequences: 2}`")]
    out = []
    for spelled, values in node.entries.items():
        profile = cat.lookup(spelled)
        if profile is None:
            out.append(FileProblem(node.key_loc(spelled), f"{where}: unknown profile {spelled!r}",
                                   f"use short or full names of: {', '.join(p.short_name for p in cat.profiles)}"))
            continue
        if not isinstance(values, YMap):
            out.append(FileProblem(values.loc, f"{where}.{spelled}: must map limit names to values",
                                   f"write e.g. `{spelled}: {{{profile.limits[0].name if profile.limits else 'limit'}: ...}}`"))
            continue
        for name, value in values.entries.items():
            lim = profile.limit(name)
            if lim is None:
                out.append(FileProblem(values.key_loc(name), f"{where}.{spelled}: {profile.name} has no limit {name!r}",
                                       f"its limits: {', '.join(x.name for x in profile.limits) or 'none'}"))
    return out


def config_from_mapping(data: dict[str, Any], base: EngineConfig | None = None, *,
                        source: str = "configuration") -> EngineConfig:
    """Build an EngineConfig from a file's mapping (unknown keys are refused)."""
    base = base or EngineConfig()
    if "model" in data and "models" in data:
        raise ConfigError([f"{source}: set either model (one model) or models (a list), not both"])
    kw = _settings(data, EngineConfig, source)
    if "models" in kw:
        entries = kw["models"]
        if not isinstance(entries, list) or not entries:
            raise ConfigError([f"{source}: models must be a non-empty list of model settings"])
        kw["models"] = tuple(ModelConfig(**_settings(e, ModelConfig, f"{source}: models[{i}]"))
                             for i, e in enumerate(entries))
    if "model" in kw:
        kw["model"] = replace(base.model, **_settings(kw["model"], ModelConfig, f"{source}: model"))
        kw["models"] = ()
    for name, cls in (("admin", AdminAccess), ("connections", ConnectionPolicy)):
        if name in kw:
            kw[name] = replace(getattr(base, name), **_settings(kw[name], cls, f"{source}: {name}"))
    return replace(base, **kw)


def _settings(value, cls, where) -> dict[str, Any]:
    """`value` as keyword arguments of the dataclass `cls`: profiles as a tuple of names (a list or
    one comma-separated string), limits as profile -> limit -> value."""
    if not isinstance(value, dict):
        raise ConfigError([f"{where} must be a mapping"])
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError([f"{where}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"])
    out = dict(value)
    if "profiles" in out:
        profiles = out["profiles"]
        out["profiles"] = tuple(profiles.split(",") if isinstance(profiles, str) else (profiles or ()))
    if "limits" in out:
        limits = out["limits"] or {}
        if not isinstance(limits, dict) or not all(isinstance(v, dict) for v in limits.values()):
            raise ConfigError([f"{where}: limits must map profile names to mappings of limit values"])
        out["limits"] = {k: dict(v) for k, v in limits.items()}
    return out


def check(config: EngineConfig) -> EngineConfig:
    """What only the engine judges of a configuration (the SDK judges profiles and limits when it
    starts): its role, pacing, ranks and models. Raises ConfigError with every problem."""
    problems = []
    if config.role not in ROLE_NAMES:
        problems.append(f"role {config.role!r} is not one of {', '.join(ROLE_NAMES)}")
    if config.token_delay_ms < 0:
        problems.append("token_delay_ms must not be negative")
    if config.data_parallel_size < 1:
        problems.append("data_parallel_size must be at least 1")
    seen: set[str] = set()
    for m in config.served_models:
        if not m.name:
            problems.append("models: every model needs a name")
        elif m.name in seen:
            problems.append(f"models: {m.name!r} is listed twice")
        seen.add(m.name)
        if m.max_output_tokens < 1 or m.max_context_tokens < m.max_output_tokens:
            problems.append(f"model {m.name!r}: need 1 <= max_output_tokens <= max_context_tokens")
    admin = config.admin
    if any((admin.tls_cert, admin.tls_key, admin.client_ca)) and not all((admin.tls_cert, admin.tls_key, admin.client_ca)):
        problems.append("admin mTLS needs all of --admin-tls-cert, --admin-tls-key and --admin-client-ca")
    if admin.mtls and admin.port is None:
        problems.append("admin mTLS needs its own address: set --admin-port")
    if problems:
        raise ConfigError(problems)
    return config


def requested_profiles(config: EngineConfig) -> tuple[str, ...] | None:
    """The profiles the SDK is asked to advertise: None (every one it can serve) for `all`."""
    spelled = tuple(s.strip() for s in config.profiles if s.strip())
    return None if not spelled or "all" in spelled else spelled


def description_limits(config: EngineConfig, cat: Catalogue) -> dict[str, dict[str, Any]]:
    """The limit values the engine declares: its own choices, then the configured ones. A
    profile the contract does not know is passed on under its spelling, for the SDK to refuse."""
    limits = {name: dict(values) for name, values in REFERENCE_LIMITS.items() if cat.profile(name) is not None}
    for spelled, values in config.limits.items():
        profile = cat.lookup(spelled)
        limits.setdefault(profile.name if profile is not None else spelled, {}).update(values)
    admin = limits.setdefault("openengine.admin", {})
    if "updatable_limits" not in admin:
        # Every limit the contract lets UpdateConfig change, of the profiles the role allows.
        admin["updatable_limits"] = [lim.reference for p in cat.profiles if p.allows_role(config.role)
                                     for lim in p.limits if lim.updatable]
    return limits


def model_profiles(config: EngineConfig, model: ModelConfig, cat: Catalogue) -> tuple[str, ...]:
    """The model-scoped profiles a served model lists: as configured, else every model-scoped
    profile the engine is asked to advertise that its role allows."""
    if model.profiles is not None:
        return tuple(s.strip() for s in model.profiles if s.strip())
    requested = requested_profiles(config)
    wanted = None if requested is None else {p.name for p in map(cat.lookup, requested) if p is not None}
    return tuple(p.name for p in cat.profiles if p.scope == "model" and p.allows_role(config.role)
                 and (wanted is None or p.name in wanted))

