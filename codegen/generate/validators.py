"""Generate `openengine/validate/_generated.py`: the registry's profile combinations as data.

Everything the compiled descriptors carry (limits with their types, defaults, ranges and enum
values, profile versions, scopes and roles) the runtime validators read from them
(`openengine.validate._tables`); only what the descriptors lack, prerequisites and incompatible
combinations, is written out here, as tuples the hand-written interpreter applies. The rows are
computed by pure functions; `templates/validators/` only prints them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from codegen.generate import GenerationContext, Output, header
from codegen.generate.templating import environment, render
from codegen.registry.model import Registry

OUTPUT = "openengine/validate/_generated.py"


@dataclass(frozen=True)
class RequireRow:
    profile: str
    required: str
    comparators: tuple[tuple[str, tuple[int, int]], ...]
    text: str


@dataclass(frozen=True)
class IncompatRow:
    profiles: tuple[str, ...]                       # every profile that must be advertised
    conditions: tuple[tuple[str, str, str, Any], ...]   # (profile, limit, operator, value)
    path: str
    message: str


def require_rows(registry: Registry) -> list[RequireRow]:
    return [RequireRow(p.name, r.profile, tuple((op, (v.major, v.minor)) for op, v in r.range.comparators),
                       f"{r.profile} {r.range}")
            for p in registry.profiles for r in p.requires]


def incompat_rows(registry: Registry) -> list[IncompatRow]:
    rows = []
    for p in registry.profiles:
        for inc in p.incompatible_with:
            needed = [p.name] + ([inc.profile] if inc.profile else []) + [c.profile for c in inc.when]
            needed = tuple(dict.fromkeys(n for n in needed if registry.profile(n) is not None))
            if inc.when:
                first = inc.when[0]
                owner = registry.profile(first.profile)
                path = f"{owner.capability.field}.{first.limit}" if owner and owner.capability else "profiles"
                what = " and ".join(str(c) for c in inc.when)
            else:
                path, what = "profiles", ""
            pair = f"{p.name} with {inc.profile}" if inc.profile and inc.profile != p.name else p.name
            message = f"{pair} is incompatible" + (f" when {what}" if what else "") + f": {inc.reason.strip()}"
            conditions = tuple((c.profile, c.limit, c.operator, c.value) for c in inc.when)
            rows.append(IncompatRow(needed, conditions, path, message))
    return rows


def render_module(registry: Registry) -> str:
    environment().filters.setdefault("pyrepr", repr)
    return render("validators/_generated.py.j2", header=header("#"), registry=registry,
                  requires=require_rows(registry), incompatible=incompat_rows(registry))


def generate(ctx: GenerationContext) -> list[Output]:
    return [Output(OUTPUT, render_module(ctx.registry))]
