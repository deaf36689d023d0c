"""How a reference engine is configured: role, advertised profiles, limit values, served models,
pacing, admin guard and faults. `resolve_config` checks a configuration against the contract and refuses
an invalid one with every problem named (`ConfigError`)."""

from __future__ import annotations

import json
import types
import typing
import uuid
from dataclasses import dataclass, field, fields, is_dataclass, replace
from pathlib import Path
from typing import Any, Callable

from openengine.aliases import ALIASES, lookup as lookup_alias
from openengine.contractkit.locations import Loc
from openengine.contractkit.yamlsource import SourceError, SourceFile, YMap, YScalar, YSeq, read_file
from openengine.contract import HEALTH_SERVICE, Catalogue, ProfileInfo, RpcInfo, catalogue, combination_problems, role_numbers
from openengine.engine.faults import FAULTS
from openengine.engine import services
from openengine.serve import AdminAccess
from openengine.serve.limits import coerce
from openengine.serve.profiles import combination_refusals, missing_rpcs, watch_interval_problems
from openengine.serve.server import PROTOCOL_CLASSES

ROLE_NAMES = role_numbers()

# Values the reference engine runs with unless configured otherwise. They are the engine's own
# choices (which features the stand-in model offers, sized so that load moves in a demo), not a
# copy of the registry: a limit missing here takes its registry default from the descriptors.
REFERENCE_LIMITS: dict[str, dict[str, Any]] = {
    "openengine.core": {
        "max_logprobs": 5, "max_sequences": 4, "guided_decoding_modes": ["json_object", "choice"],
        "logit_bias": True, "min_p": True, "prompt_logprobs": True, "priority": True,
        "max_running_requests": 8, "max_batch_tokens": 8192,
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


class ConfigError(Exception):
    """The configuration cannot be served; `problems` names each reason."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


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
class ResolvedModel:
    """A served model checked against the contract: the model-scoped profiles it lists (full
    names) and the limits it sets for them (overrides of the engine-wide values)."""

    config: ModelConfig
    profiles: tuple[str, ...]
    overrides: dict[str, dict[str, Any]]

    @property
    def name(self) -> str:
        return self.config.name


# Where Admin is served and how it is guarded: the SDK's own settings. With neither a token nor
# mutual TLS configured the engine makes up a token at start and logs it, so Admin is never open.
AdminConfig = AdminAccess


@dataclass(frozen=True)
class EngineConfig:
    host: str = "127.0.0.1"
    port: int = 50051
    role: str = "aggregated"
    # Profiles as given (short or full names, or "all"); resolved into `advertised`.
    profiles: tuple[str, ...] = ("all",)
    # Limit values per profile (full or short profile name -> limit name -> value).
    limits: dict[str, dict[str, Any]] = field(default_factory=dict)
    model: ModelConfig = ModelConfig()
    # Several served models; when empty the engine serves `model` alone. The first is the default
    # model (the one a request with an empty `model` gets).
    models: tuple[ModelConfig, ...] = ()
    token_delay_ms: float = 5.0
    instance_id: str | None = None
    engine_name: str = "openengine-reference"
    data_parallel_size: int = 1
    admin: AdminConfig = AdminConfig()
    faults: tuple[str, ...] = ()
    # Compatibility aliases of earlier revisions to serve next to v1 (`openengine`, `control`).
    aliases: tuple[str, ...] = ()

    @property
    def served_models(self) -> tuple[ModelConfig, ...]:
        return tuple(self.models) or (self.model,)


@dataclass(frozen=True)
class ResolvedConfig:
    """A configuration checked against the contract: what the engine actually serves."""

    config: EngineConfig
    catalogue: Catalogue
    advertised: tuple[ProfileInfo, ...]
    limits: dict[str, dict[str, Any]]     # full profile name -> every limit's effective value
    instance_id: str
    faults: frozenset[str]
    admin_token: str | None
    admin_token_generated: bool
    warnings: tuple[str, ...] = ()
    models: tuple[ResolvedModel, ...] = ()
    # Profiles `--profiles all` did not take, each with the reason (also among `warnings`).
    left_out: dict[str, str] = field(default_factory=dict)

    def has(self, profile: str) -> bool:
        return any(p.name == profile for p in self.advertised)

    def limit(self, profile: str, name: str) -> Any:
        return self.limits[profile][name]

    @property
    def role(self) -> str:
        return self.config.role


# Shipped with the package; `oespec generate` publishes a copy as schemas/engine_config.schema.json
# (with a modeline in the README examples) for editors and other tools. The engine itself checks a
# file with `file_problems`, which needs no JSON Schema library.
def config_schema() -> dict:
    """The configuration file's JSON Schema."""
    from importlib import resources

    return json.loads(resources.files("openengine.engine").joinpath("engine_config.schema.json").read_text("utf-8"))


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON configuration file into a plain mapping, with the located loader the
    registry uses: a syntax error, a key the engine does not know (with the nearest known key), a
    value of the wrong type, or a profile, limit, role, alias or fault the contract and the engine
    do not know is reported as file:line:column, what is wrong and how to fix it."""
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
    types are the fields' of EngineConfig, AdminConfig and ModelConfig) or names what the compiled
    contract does not define (profiles, their limits and each value's type and range, roles), each
    at the key or value concerned."""
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
    out += _mapping_problems(root, EngineConfig, "(document)", cat, renamed={"alias": "aliases"})
    return out


def _mapping_problems(node: YMap, cls: type, where: str, cat: Catalogue,
                      renamed: dict[str, str] | None = None) -> list[FileProblem]:
    """A mapping of `cls`'s settings: its keys are the fields' names (`renamed`: key -> field)."""
    import difflib

    renamed = renamed or {}
    spelled = {field_name: key for key, field_name in renamed.items()}
    hints = typing.get_type_hints(cls)
    known = sorted(spelled.get(f.name, f.name) for f in fields(cls))
    out = []
    for key, value in node.entries.items():
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            out.append(FileProblem(node.key_loc(key), f"{where}: unknown key {key!r}",
                                   (f"did you mean {close[0]!r}? " if close else "") + f"known keys: {', '.join(known)}"))
            continue
        name = renamed.get(key, key)
        path = key if where == "(document)" else f"{where}.{key}"
        out += _value_problems(value, hints[name], path, name, cat)
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
        return _names_problems(node, where, name, cat)
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


def _names_problems(node, where: str, name: str, cat: Catalogue) -> list[FileProblem]:
    """A list of names (or one comma-separated string): profiles, aliases or faults."""
    if isinstance(node, YScalar) and node.value is None and name == "faults":
        return []
    items = node.items if isinstance(node, YSeq) else [node]
    out = []
    for item in items:
        if not isinstance(item, YScalar) or not isinstance(item.value, str):
            out.append(FileProblem(item.loc, f"{where}: must be names", "write a list of names or one "
                                                                         "comma-separated string"))
            continue
        for spelled in (n.strip() for n in item.value.split(",") if n.strip()):
            if name == "profiles" and spelled != "all" and cat.lookup(spelled) is None:
                out.append(FileProblem(item.loc, f"{where}: unknown profile {spelled!r}",
                                       f"use short or full names of: {', '.join(p.short_name for p in cat.profiles)}"))
            elif name == "aliases" and lookup_alias(spelled) is None:
                out.append(FileProblem(item.loc, f"{where}: unknown alias {spelled!r}", f"use one of: {', '.join(ALIASES)}"))
            elif name == "faults" and spelled not in FAULTS:
                out.append(FileProblem(item.loc, f"{where}: unknown fault {spelled!r}",
                                       "`oespec engine --list-faults` lists them"))
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
                continue
            try:
                coerce(lim, value.plain())
            except ValueError as err:
                out.append(FileProblem(value.loc, f"{where}.{spelled}.{name}: {err}",
                                       "give it a value of the type and range the contract defines"))
    return out


_TOP_KEYS = {"host", "port", "role", "profiles", "limits", "model", "models", "token_delay_ms", "instance_id",
             "engine_name", "data_parallel_size", "admin", "faults", "alias"}


def config_from_mapping(data: dict[str, Any], base: EngineConfig | None = None, *,
                        source: str = "configuration") -> EngineConfig:
    """Build an EngineConfig from a file's mapping (unknown keys are refused)."""
    base = base or EngineConfig()
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ConfigError([f"{source}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(_TOP_KEYS))}"])
    kw: dict[str, Any] = {}
    for key in ("host", "port", "role", "token_delay_ms", "instance_id", "engine_name",
                "data_parallel_size"):
        if key in data:
            kw[key] = data[key]
    if "profiles" in data:
        profiles = data["profiles"]
        kw["profiles"] = tuple(profiles.split(",") if isinstance(profiles, str) else profiles)
    if "limits" in data:
        if not isinstance(data["limits"], dict) or not all(isinstance(v, dict) for v in data["limits"].values()):
            raise ConfigError([f"{source}: limits must map profile names to mappings of limit values"])
        kw["limits"] = {k: dict(v) for k, v in data["limits"].items()}
    if "model" in data and "models" in data:
        raise ConfigError([f"{source}: set either model (one model) or models (a list), not both"])
    if "model" in data:
        kw["model"] = replace(base.model, **_model(data["model"], f"{source}: model"))
        kw["models"] = ()
    if "models" in data:
        entries = data["models"]
        if not isinstance(entries, list) or not entries:
            raise ConfigError([f"{source}: models must be a non-empty list of model settings"])
        kw["models"] = tuple(ModelConfig(**_model(e, f"{source}: models[{i}]")) for i, e in enumerate(entries))
    if "admin" in data:
        kw["admin"] = replace(base.admin, **_sub(data["admin"], AdminConfig, f"{source}: admin"))
    if "faults" in data:
        kw["faults"] = tuple(data["faults"] or ())
    if "alias" in data:
        kw["aliases"] = split_aliases(data["alias"])
    return replace(base, **kw)


def split_aliases(value) -> tuple[str, ...]:
    """`openengine,control` or a list of names -> the names."""
    names = value.split(",") if isinstance(value, str) else list(value or ())
    return tuple(str(n).strip() for n in names if str(n).strip())


def _model(value, where) -> dict[str, Any]:
    value = dict(_sub(value, ModelConfig, where))
    if "profiles" in value:
        profiles = value["profiles"]
        value["profiles"] = tuple(profiles.split(",") if isinstance(profiles, str) else (profiles or ()))
    if "limits" in value:
        limits = value["limits"] or {}
        if not isinstance(limits, dict) or not all(isinstance(v, dict) for v in limits.values()):
            raise ConfigError([f"{where}: limits must map profile names to mappings of limit values"])
        value["limits"] = {k: dict(v) for k, v in limits.items()}
    return value


def _sub(value, cls, where):
    if not isinstance(value, dict):
        raise ConfigError([f"{where} must be a mapping"])
    known = set(cls.__dataclass_fields__)
    unknown = sorted(set(value) - known)
    if unknown:
        raise ConfigError([f"{where}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"])
    return value


def resolve_config(config: EngineConfig, *, cat: Catalogue | None = None) -> ResolvedConfig:
    """Check the configuration against the contract. Raises ConfigError with every problem."""
    cat = cat or catalogue()
    problems: list[str] = []
    warnings: list[str] = []
    role = config.role
    if role not in ROLE_NAMES:
        raise ConfigError([f"role {role!r} is not one of {', '.join(ROLE_NAMES)}"])

    # Profiles named explicitly (core is always one of them) must all be served; "all" adds every
    # other profile that can be served with them (`_select_profiles`).
    spelled = [s.strip() for s in config.profiles if s.strip()]
    take_all = not spelled or "all" in spelled
    explicit: list[ProfileInfo] = []
    for name in spelled:
        if name == "all":
            continue
        profile = cat.lookup(name)
        if profile is None:
            known = ", ".join(p.short_name for p in cat.profiles)
            problems.append(f"unknown profile {name!r}; known: {known} (short or full names)")
        elif profile not in explicit:
            explicit.append(profile)
    core = cat.profile(cat.core)
    if core is not None and core not in explicit:
        explicit.insert(0, core)
    for profile in explicit:
        if not profile.allows_role(role):
            problems.append(f"{profile.name} is scoped to role {' or '.join(profile.roles)}; "
                            f"this engine's role is {role} (use --role {profile.roles[0]} or drop the profile)")
        missing = missing_rpcs(profile, implemented)
        if missing:
            problems.append(f"{profile.name} cannot be advertised: this engine has no implementation of "
                            f"{', '.join(r.name for r in missing)} (REQ-CORE-002); drop the profile")

    # Limits of every profile: registry default < reference engine choice < configuration.
    limits: dict[str, dict[str, Any]] = {}
    for profile in cat.profiles:
        values = profile.defaults()
        for name, value in REFERENCE_LIMITS.get(profile.name, {}).items():
            if profile.limit(name) is not None:
                values[name] = value
        limits[profile.name] = values
    configured: dict[str, set[str]] = {}   # full profile name -> the limits the configuration sets
    for spelled_profile, values in config.limits.items():
        profile = cat.lookup(spelled_profile)
        if profile is None:
            problems.append(f"limits: unknown profile {spelled_profile!r}")
            continue
        configured.setdefault(profile.name, set()).update(values)
        limits[profile.name].update(_coerce_limits(profile, values, "limits", problems))
    problems += watch_interval_problems(limits)

    def check(profiles) -> list[str]:
        versions = {p.name: p.version for p in profiles}
        return [str(p) for p in combination_problems(versions, {p.name: limits[p.name] for p in profiles}, cat=cat)]

    left_out: dict[str, str] = {}
    chosen = list(explicit)
    if take_all and not problems:
        candidates = _all_candidates(config, cat, explicit, left_out)
        chosen, rejected = _select_profiles(explicit, candidates, check)
        left_out.update(rejected)
    advertised = tuple(p for p in cat.profiles if p in chosen)
    for name, why in left_out.items():
        warnings.append(f"--profiles all leaves out {name}: {why}")

    models, model_problems = _resolve_models(config, cat, advertised)
    problems += model_problems
    # REQ-CAP-012: a model-scoped profile is advertised exactly when a served model lists it.
    unused = [p for p in advertised if p.scope == "model" and not any(p.name in m.profiles for m in models)]
    if unused and not model_problems:
        warnings.append(f"not advertised, no served model lists it: {', '.join(p.name for p in unused)}")
        advertised = tuple(p for p in advertised if p not in unused)
    for name in sorted(configured.keys() - {p.name for p in chosen}):
        why = f" ({left_out[name]})" if name in left_out else " (add it to --profiles)"
        problems.append(f"limits: {name} is configured but not enabled{why}")
    limits = {p.name: limits[p.name] for p in advertised}
    if "openengine.admin" in limits and "updatable_limits" in limits["openengine.admin"] \
            and "updatable_limits" not in configured.get("openengine.admin", ()):
        limits["openengine.admin"]["updatable_limits"] = [
            lim.reference for p in advertised for lim in p.limits if lim.updatable]

    if not problems:
        problems += combination_refusals(advertised, limits, {m.name: m.profiles for m in models},
                                         {m.name: m.overrides for m in models}, cat=cat)

    for name in config.aliases:
        if lookup_alias(name) is None:
            problems.append(f"unknown alias {name!r}; known: {', '.join(ALIASES)} "
                            f"({', '.join(a.service for a in ALIASES.values())})")
    for name in config.faults:
        if name not in FAULTS:
            problems.append(f"unknown fault {name!r}; `oespec engine --list-faults` lists them")
    if config.token_delay_ms < 0:
        problems.append("token_delay_ms must not be negative")
    if config.data_parallel_size < 1:
        problems.append("data_parallel_size must be at least 1")
    for m in config.served_models:
        if m.max_output_tokens < 1 or m.max_context_tokens < m.max_output_tokens:
            problems.append(f"model {m.name!r}: need 1 <= max_output_tokens <= max_context_tokens")
    admin = config.admin
    tls = (admin.tls_cert, admin.tls_key, admin.client_ca)
    if any(tls) and not all(tls):
        problems.append("admin mTLS needs all of --admin-tls-cert, --admin-tls-key and --admin-client-ca")
    if admin.mtls and admin.port is None:
        problems.append("admin mTLS needs its own address: set --admin-port")
    if problems:
        raise ConfigError(problems)

    token, generated = admin.token, False
    if any(p.name == "openengine.admin" for p in advertised) and not token and not admin.mtls:
        token, generated = uuid.uuid4().hex, True
    return ResolvedConfig(
        config=config, catalogue=cat, advertised=advertised, limits=limits,
        instance_id=config.instance_id or f"ref-{uuid.uuid4().hex[:12]}",
        faults=frozenset(config.faults), admin_token=token, admin_token_generated=generated,
        warnings=tuple(warnings), models=tuple(models), left_out=left_out)


def implemented(rpc: RpcInfo) -> bool:
    """Whether the reference engine serves `rpc`: the SDK does (the backend has every part the
    SDK's services need), or a service class of the backend has a method of its name."""
    if rpc.service == HEALTH_SERVICE:
        return True
    short = rpc.service.rsplit(".", 1)[-1]
    owners = [cls for cls in PROTOCOL_CLASSES if cls.__name__ == short] + [services.service_classes().get(short)]
    return any(callable(getattr(owner, rpc.method.name, None)) for owner in owners if owner is not None)


def _all_candidates(config: EngineConfig, cat: Catalogue, explicit: list[ProfileInfo],
                    left_out: dict[str, str]) -> list[ProfileInfo]:
    """What `--profiles all` may add to the explicit profiles, in catalogue order: every profile the
    role allows that the engine implements and, when model-scoped, that a served model lists.
    Profiles the engine cannot serve go to `left_out` with the reason."""
    out = []
    for profile in cat.profiles:
        if profile in explicit or not profile.allows_role(config.role):
            continue
        missing = missing_rpcs(profile, implemented)
        if missing:
            left_out[profile.name] = f"this engine has no implementation of {', '.join(r.name for r in missing)}"
        elif profile.scope == "model" and not any(_lists(cat, m, profile) for m in config.served_models):
            left_out[profile.name] = "no served model lists it"
        else:
            out.append(profile)
    return out


def _lists(cat: Catalogue, model: ModelConfig, profile: ProfileInfo) -> bool:
    if model.profiles is None:
        return True
    return any(cat.lookup(s.strip()) is profile for s in model.profiles if s.strip())


def _select_profiles(seed: list[ProfileInfo], candidates: list[ProfileInfo],
                     problems_of: Callable[[list[ProfileInfo]], list[str]]
                     ) -> tuple[list[ProfileInfo], dict[str, str]]:
    """The profiles `--profiles all` serves: `seed` (core and the profiles named explicitly) plus a
    maximal set of `candidates` that can be served with them.

    Deterministic: candidates are tried in catalogue order (the order of the Capabilities fields,
    so established profiles come before newer ones) and each is added when it brings no problem the
    set did not already have (an incompatibility, a missing prerequisite). Passes repeat until one
    adds nothing, so a profile whose prerequisite comes later in the catalogue still gets in. The
    result is maximal: no candidate left out can be added on its own. Returns the chosen profiles
    and, for each candidate left out, why."""
    chosen = list(seed)
    current = set(problems_of(chosen))
    pending = list(candidates)
    reasons: dict[str, str] = {}
    added = True
    while added and pending:
        added = False
        for profile in list(pending):
            found = problems_of(chosen + [profile])
            new = [p for p in found if p not in current]
            if new:
                reasons[profile.name] = "; ".join(new)
                continue
            chosen.append(profile)
            pending.remove(profile)
            reasons.pop(profile.name, None)
            current = set(found)
            added = True
    return chosen, {p.name: reasons[p.name] for p in pending}


def _resolve_models(config: EngineConfig, cat: Catalogue,
                    advertised: tuple[ProfileInfo, ...]) -> tuple[list[ResolvedModel], list[str]]:
    """Each served model's model-scoped profiles and its own limit values for them."""
    problems: list[str] = []
    out: list[ResolvedModel] = []
    enabled = [p for p in advertised if p.scope == "model"]
    seen: set[str] = set()
    for m in config.served_models:
        where = f"models: {m.name!r}"
        if not m.name:
            problems.append("models: every model needs a name")
        elif m.name in seen:
            problems.append(f"{where} is listed twice")
        seen.add(m.name)
        if m.profiles is None:
            profiles = [p.name for p in enabled]
        else:
            profiles = []
            for spelled in (s.strip() for s in m.profiles if s.strip()):
                profile = cat.lookup(spelled)
                if profile is None:
                    problems.append(f"{where}: unknown profile {spelled!r}")
                elif profile.scope != "model":
                    problems.append(f"{where}: {profile.name} is not model-scoped; list it in the engine's profiles")
                elif profile not in enabled:
                    problems.append(f"{where}: {profile.name} is not enabled engine-wide (add it to --profiles)")
                elif profile.name not in profiles:
                    profiles.append(profile.name)
        overrides: dict[str, dict[str, Any]] = {}
        for spelled, values in m.limits.items():
            profile = cat.lookup(spelled)
            if profile is None or profile.scope != "model":
                problems.append(f"{where}: limits: {spelled!r} is not a model-scoped profile")
                continue
            if profile.name not in profiles:
                problems.append(f"{where}: limits: {profile.name} is configured but the model does not list it")
                continue
            coerced = _coerce_limits(profile, values, f"{where}: limits", problems)
            if coerced:
                overrides.setdefault(profile.name, {}).update(coerced)
        out.append(ResolvedModel(m, tuple(p.name for p in enabled if p.name in profiles), overrides))
    return out, problems


def _coerce_limits(profile, values: dict, where: str, problems: list[str]) -> dict[str, Any]:
    """Configured values of one profile's limits, checked against each limit's type and range;
    every unknown limit or bad value is added to `problems` (prefixed with `where`)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        lim = profile.limit(name)
        if lim is None:
            known = ", ".join(limit.name for limit in profile.limits)
            problems.append(f"{where}: {profile.name} has no limit {name!r}; known: {known}")
            continue
        try:
            out[name] = coerce(lim, value)
        except ValueError as err:
            problems.append(f"{where}: {err}")
    return out
