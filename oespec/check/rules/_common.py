"""Small helpers the rule modules share."""

from __future__ import annotations

from typing import Iterator

from oespec.registry.model import Capability, Limit, Profile, Registry


def profiles_by_name(registry: Registry) -> dict[str, Profile]:
    """Name -> the first profile of that name (a duplicate is its own finding)."""
    out: dict[str, Profile] = {}
    for profile in registry.profiles:
        out.setdefault(profile.name, profile)
    return out


def repeats(items, key, first_of):
    """(item, what `first_of` said of the first item with the same key) for every repeat."""
    first: dict = {}
    for item in items:
        k = key(item)
        if k in first:
            yield item, first[k]
        else:
            first[k] = first_of(item)


def prerequisites(registry: Registry, name: str, by_name: dict[str, Profile] | None = None) -> set[str]:
    """Every profile `name` requires, directly or through its prerequisites, plus the mandatory
    core (always advertised). Unknown names are skipped; cycles terminate. A rule asking for many
    profiles passes `by_name` (`profiles_by_name`) once, so the whole rule stays linear."""
    by_name = profiles_by_name(registry) if by_name is None else by_name
    seen: set[str] = set()
    stack = [name]
    while stack:
        current = by_name.get(stack.pop())
        if current is None:
            continue
        for req in current.requires:
            if req.profile not in seen and req.profile in by_name:
                seen.add(req.profile)
                stack.append(req.profile)
    core = registry.core
    if core is not None and core.name != name:
        seen.add(core.name)
    seen.discard(name)
    return seen


def capabilities(registry: Registry) -> Iterator[tuple[Profile, Capability]]:
    """(profile, its capability) for every profile that declares one."""
    return ((profile, profile.capability) for profile in registry.profiles if profile.capability is not None)


def all_limits(registry: Registry) -> Iterator[tuple[Profile, Limit]]:
    """(profile, limit) for every limit of every profile."""
    return ((profile, limit) for profile in registry.profiles for limit in profile.limits)


def versioned_elements(profile: Profile) -> Iterator[tuple[str, object]]:
    """The versioned elements of a profile: ("rpc", rpc), ("message", msg), ("limit", limit)."""
    for rpc in profile.rpcs:
        yield "rpc", rpc
    for msg in profile.messages:
        yield "message", msg
    for limit in profile.limits:
        yield "limit", limit
