"""Which profiles an engine advertises, and with which limits.

A profile can be served when every RPC the compiled contract lists for it is implemented (by the
SDK, with the backend part it needs, or by the backend itself), its scope allows the engine's
role, and it combines with the others (`openengine.contract.combination_problems`). The RPCs come
from the descriptors, so nothing here names a profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from openengine.contract import Catalogue, ProfileInfo, RpcInfo, combination_problems
from openengine.serve.backend import EngineDescription
from openengine.serve.limits import coerce
from openengine.serve.load import LOAD_PROFILE


# What a backend gets for a limit it does not state, where the contract's default would switch
# on a feature the backend has to implement itself: off, so an engine never advertises what it
# does not do. Every other unstated limit takes the contract's default.
UNSTATED = {"openengine.core": {"max_logprobs": 0, "output_logprobs": False, "prompt_logprobs": False,
                                "max_sequences": 1, "min_p": False, "priority": False,
                                "guided_decoding_modes": [], "speculative_decoding": False,
                                "logits_post_processor": False}}


class CannotServe(Exception):
    """The backend cannot be served as asked: every reason, each naming what to change."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Selection:
    """The advertised profiles (contract order) and the effective value of each of their limits."""

    advertised: tuple[ProfileInfo, ...]
    limits: dict[str, dict[str, Any]]                    # profile -> limit -> value
    model_limits: dict[str, dict[str, dict[str, Any]]]   # model -> profile -> its own values
    left_out: tuple[str, ...]                            # profiles not served, with the reason


def _why_not(profile: ProfileInfo, role: str, implemented: Callable[[RpcInfo], bool]) -> str | None:
    # REQ-CORE-002: a profile is advertised only when every RPC of it is served.
    missing = [rpc for rpc in profile.rpcs if not implemented(rpc)]
    if missing:
        return (f"{profile.name} needs {', '.join(r.name for r in missing)}, which the backend does not "
                "implement")
    if not profile.allows_role(role):
        return f"{profile.name} is for the roles {', '.join(profile.roles)}, and the engine's role is {role}"
    return None


def _declared(cat: Catalogue, values: Mapping[str, Mapping[str, Any]], where: str,
              problems: list[str]) -> dict[str, dict[str, Any]]:
    """Declared limit values by full profile name, each checked against its limit's type and range."""
    out: dict[str, dict[str, Any]] = {}
    for spelled, per in values.items():
        profile = cat.lookup(spelled)
        if profile is None:
            problems.append(f"{where}: {spelled!r} is not a profile of the contract")
            continue
        for name, value in per.items():
            lim = profile.limit(name)
            if lim is None:
                known = ", ".join(x.name for x in profile.limits) or "none"
                problems.append(f"{where}: {profile.name} has no limit {name!r} (its limits: {known})")
                continue
            try:
                out.setdefault(profile.name, {})[name] = coerce(lim, value)
            except ValueError as err:
                problems.append(f"{where}: {err}")
    return out


def combination_refusals(advertised: Sequence[ProfileInfo], limits: Mapping[str, Mapping[str, Any]],
                         model_profiles: Mapping[str, Sequence[str]],
                         model_limits: Mapping[str, Mapping[str, Mapping[str, Any]]], *,
                         cat: Catalogue | None = None) -> list[str]:
    """Broken prerequisites and forbidden combinations of what an engine would advertise:
    engine-wide (`limits`), then per served model with the model-scoped profiles it lists
    (`model_profiles`) and its own limit values over the engine-wide ones (`model_limits`), and
    WatchLoad's interval limits out of order. Start-up and `UpdateConfig` refuse with this one
    function, so a combination refused at start is refused at run time too."""
    problems = [str(p) for p in combination_problems({p.name: p.version for p in advertised}, limits, cat=cat)]
    problems += watch_interval_problems(limits)
    if problems:
        return problems
    model_scoped = [p.name for p in advertised if p.scope == "model"]
    for model, profiles in model_profiles.items():
        overrides = model_limits.get(model, {})
        if not any(overrides.values()) and set(model_scoped) <= set(profiles):
            continue  # the same combination as engine-wide, checked above
        versions = {p.name: p.version for p in advertised if p.scope != "model" or p.name in profiles}
        merged = {name: {**values, **overrides.get(name, {})} for name, values in limits.items() if name in versions}
        problems += [f"models: {model}: {p}" for p in combination_problems(versions, merged, cat=cat)]
    return problems


def watch_interval_problems(limits: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The WatchLoad interval limits must be ordered for any request's settings to be computed
    (openengine.validate.effective_watch_settings clamps between them)."""
    load = limits.get(LOAD_PROFILE)
    if load and not (load["min_watch_interval_ms"] <= load["default_watch_interval_ms"]
                     <= load["max_watch_interval_ms"]):
        return ["limits: openengine.load needs min_watch_interval_ms <= default_watch_interval_ms "
                "<= max_watch_interval_ms"]
    return []


def select(cat: Catalogue, description: EngineDescription, requested: Iterable[str] | None,
           implemented: Callable[[RpcInfo], bool]) -> Selection:
    """The profiles to advertise: the `requested` ones (short or full names; the mandatory ones
    always), or, when None, every profile the backend can serve that combines with the others.
    Raises CannotServe naming each requested profile that cannot be served and why."""
    problems: list[str] = []
    declared = _declared(cat, description.limits, "limits", problems)
    role = description.role
    left_out: list[str] = []
    if requested is None:
        chosen = []
        for profile in cat.profiles:
            why = _why_not(profile, role, implemented)
            if why is None:
                chosen.append(profile)
            else:
                left_out.append(why)
    else:
        names = {p.name for p in cat.profiles if p.mandatory}
        for spelled in requested:
            profile = cat.lookup(spelled)
            if profile is None:
                problems.append(f"profiles: {spelled!r} is not a profile of the contract")
            else:
                names.add(profile.name)
        chosen = [p for p in cat.profiles if p.name in names]
        problems += [why for why in (_why_not(p, role, implemented) for p in chosen) if why]
    limits = {p.name: {**p.defaults(), **UNSTATED.get(p.name, {}), **declared.get(p.name, {})} for p in chosen}
    if requested is None:
        # Leave out what does not combine, one profile at a time, until the rest does.
        while True:
            found = combination_problems({p.name: p.version for p in chosen}, limits, cat=cat)
            optional = [f for f in found if not cat.profile(f.profile).mandatory]
            if not optional:
                break
            chosen = [p for p in chosen if p.name != optional[0].profile]
            limits.pop(optional[0].profile, None)
            left_out.append(str(optional[0]))
    problems += [str(f) for f in combination_problems({p.name: p.version for p in chosen}, limits, cat=cat)]
    problems += watch_interval_problems(limits)
    advertised_names = {p.name for p in chosen}
    model_limits: dict[str, dict[str, dict[str, Any]]] = {}
    for model in description.models:
        where = f"models[{model.name}]"
        for spelled in model.profiles:
            profile = cat.lookup(spelled)
            if profile is None or profile.scope != "model":
                problems.append(f"{where}.profiles: {spelled!r} is not a model-scoped profile of the contract")
            elif profile.name not in advertised_names:
                problems.append(f"{where}.profiles: {profile.name} is not advertised by the engine")
        model_limits[model.name] = _declared(cat, model.limits, f"{where}.limits", problems)
    if not description.models:
        problems.append("models: declare at least one served model")
    if problems:
        raise CannotServe(problems)
    return Selection(tuple(chosen), limits, model_limits, tuple(left_out))
