"""What the engine advertises, judged by the generated validators (`openengine.validate`): one
case per requirement, each with the validator rule ids that enforce it.
"""

from __future__ import annotations

from openengine.conformance.cases.base import Failed, case, expect
from openengine.conformance.context import Context
from openengine.contract import CORE

GROUPS = [
    ("capabilities.names-canonical", ("REQ-CAP-001",), ("OEV102",),
     "every profile name is canonical"),
    ("capabilities.majors-positive", ("REQ-CAP-002",), ("OEV103",),
     "every profile major version is at least 1"),
    ("capabilities.no-duplicates", ("REQ-CAP-003",), ("OEV104",),
     "no (name, major) is advertised twice"),
    ("capabilities.reserved-names", ("REQ-CAP-004",), ("OEV105", "OEV106"),
     "every openengine.* name and major is one the registry defines"),
    ("capabilities.submessages-advertised", ("REQ-CAP-006",), ("OEV110",),
     "capability messages are set only for advertised profiles"),
    ("capabilities.limits-in-range", ("REQ-CAP-008",), ("OEV111", "OEV112", "OEV113"),
     "every limit set has its type and lies in its documented range"),
    ("capabilities.combinations", ("REQ-CAP-010",), ("OEV120", "OEV121"),
     "prerequisites are advertised and no incompatible combination is"),
    ("capabilities.role-scope", ("REQ-CAP-011",), ("OEV130", "OEV136"),
     "role-scoped profiles only for the roles they allow; ServerInfo has a role"),
    ("capabilities.model-scope", ("REQ-CAP-012",), ("OEV131", "OEV132", "OEV133", "OEV134", "OEV137"),
     "model-scoped profiles are listed by exactly the models that support them"),
    ("capabilities.upstream-views-agree", ("REQ-CAP-014",), ("OEV138",),
     "ServerInfo and ModelInfo report what the advertised limits state"),
]


def undefined_majors(ctx: Context) -> list[str]:
    """`openengine.*` profiles advertised at a major the registry does not define, 0 included:
    the validators leave a major below 1 to REQ-CAP-002's rule, but it is undefined all the same."""
    out = []
    for p in ctx.require_capabilities().profiles:
        info = ctx.contract.get(p.name)
        if info is not None and p.major < 1 and p.major != info.version[0]:
            out.append(f"{p.name} major {p.major}: the registry defines only major {info.version[0]}")
    return out


def _group_case(rule_ids: tuple[str, ...], extra=None):
    async def run(ctx: Context):
        found = [f"{v.rule_id} {v.path}: {v.message}" for v in ctx.capability_report().violations
                 if v.rule_id in rule_ids]
        if extra is not None:
            found += extra(ctx)
        expect(not found, "; ".join(found))
    return run


for _id, _reqs, _rules, _title in GROUPS:
    _extra = undefined_majors if _id == "capabilities.reserved-names" else None
    case(_id, profile=CORE, requires=_reqs, title=_title)(_group_case(_rules, _extra))


@case("core.profiles.core-listed", profile=CORE, requires=("REQ-CORE-001.2",),
      title="Capabilities.profiles lists openengine.core exactly once")
async def core_listed(ctx: Context):
    if not ctx.has_discovery:
        raise Failed("there is no Capabilities.profiles to list openengine.core: "
                     + ctx.missing_discovery())
    count = sum(1 for p in ctx.capabilities.profiles if p.name == CORE)
    listed = ", ".join(p.name for p in ctx.capabilities.profiles) or "nothing"
    expect(count >= 1, f"openengine.core is not advertised (Capabilities.profiles "
                                       f"lists {listed}): every server lists it exactly once")
    expect(count == 1, f"openengine.core is listed {count} times in Capabilities.profiles, not "
                       "exactly once")


@case("core.discovery.revision", profile=CORE, requires=("REQ-REV-001",),
      title="the capability revision is non-zero and the same in ServerInfo and Capabilities")
async def discovery_revision(ctx: Context):
    caps = ctx.require_capabilities()
    info = ctx.server_info.capability_revision
    expect(info != 0, "ServerInfo.capability_revision is 0")
    expect(caps.revision != 0, "Capabilities.revision is 0")
    expect(info == caps.revision, f"Capabilities.revision {caps.revision} differs from "
                                  f"ServerInfo.capability_revision {info}")
    return f"revision {info}"
