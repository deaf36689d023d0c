"""Names and prose: canonical profile names, the reserved prefix, no empty text."""

from __future__ import annotations

import re

from oespec.check.rule import CheckContext, Finding, rule
from openengine.contractkit.rules import Severity
from oespec.registry.model import STANDARD_PREFIX
from openengine.contractkit import naming

CANONICAL_NAME = re.compile(naming.CANONICAL_NAME)
_RESERVED_WORD = STANDARD_PREFIX.rstrip(".")


@rule("OE003", "canonical-profile-name", requirements=("REQ-ADD-001",), category="names",
      purpose="profile names are lowercase dotted words, e.g. openengine.runtime-events or acme.turbo")
def canonical_profile_name(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        # An empty name is OE005's finding.
        if profile.name.strip() and not CANONICAL_NAME.match(profile.name):
            yield Finding(profile.at("name"), f"profile name {profile.name!r} is not canonical",
                          "use lowercase words joined by dots, the first naming the owner: "
                          "openengine.<feature> for standard profiles, <vendor>.<feature> otherwise")


@rule("OE004", "reserved-prefix", requirements=("REQ-ADD-001",), category="names",
      purpose="only standard profiles use the openengine namespace; vendors never imitate it")
def reserved_prefix(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        owner = profile.name.split(".", 1)[0]
        if not profile.standard and owner.lower().replace("-", "").replace("_", "").startswith(_RESERVED_WORD):
            yield Finding(profile.at("name"),
                          f"vendor profile {profile.name!r} looks like the reserved {STANDARD_PREFIX} namespace",
                          f"name vendor profiles after the vendor (acme.<feature>); {STANDARD_PREFIX}* "
                          "is for standard profiles only")


def _texts(profile):
    """(element, key, text, what) for every prose field of a profile."""
    yield profile, "summary", profile.summary, "summary"
    yield profile, "description", profile.description, "description"
    yield profile, "deprecated", profile.deprecated, "deprecation note"
    for entry in profile.history:
        yield entry, "changes", entry.changes, f"history {entry.version} changes"
    for rpc in profile.rpcs:
        yield rpc, "description", rpc.description, f"RPC {rpc.name} description"
        yield rpc, "deprecated", rpc.deprecated, f"RPC {rpc.name} deprecation note"
    for msg in profile.messages:
        yield msg, "description", msg.description, f"message {msg.name} description"
        yield msg, "deprecated", msg.deprecated, f"message {msg.name} deprecation note"
    for limit in profile.limits:
        yield limit, "description", limit.description, f"limit {limit.name} description"
        yield limit, "unit", limit.unit, f"limit {limit.name} unit"
        yield limit, "deprecated", limit.deprecated, f"limit {limit.name} deprecation note"
    for incompatibility in profile.incompatible_with:
        yield incompatibility, "reason", incompatibility.reason, "incompatibility reason"


@rule("OE005", "non-empty-text", category="names",
      purpose="names, summaries, descriptions, history changes, reasons and units are not blank")
def non_empty_text(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        if not profile.name.strip():
            yield Finding(profile.at("name"), "the profile name is empty", "give the profile its canonical name")
        for element, key, text, what in _texts(profile):
            if text is not None and not text.strip():
                yield Finding(element.at(key), f"{profile.name or '(unnamed)'}: the {what} is empty",
                              "write the text, or remove the optional key")


@rule("OE006", "summary-one-line", severity=Severity.WARNING, category="names",
      purpose="a profile summary is one line (tables and listings show it); detail goes in description")
def summary_one_line(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        if profile.summary.strip() and "\n" in profile.summary.strip():
            yield Finding(profile.at("summary"), f"{profile.name}: the summary spans several lines",
                          "keep the summary to one sentence; move the rest to description")


@rule("OE056", "requirement-area-owned-once", category="names", requirements=("REQ-ADD-001",),
      purpose="each spec requirement area (`requirement_areas`, or the default from the short name) belongs "
              "to one profile, so each requirement is listed on one profile's page")
def requirement_area_owned_once(ctx: CheckContext):
    owner: dict[str, str] = {}
    for profile in ctx.registry.profiles:
        for index, area in enumerate(profile.requirement_areas):
            if area in owner and owner[area] != profile.name:
                where = profile.locs.get(f"requirement_areas[{index}]", profile.at("name"))
                yield Finding(where, f"{profile.name}: requirement area {area} already belongs to {owner[area]}",
                              "give the profile an area of its own in `requirement_areas` (REQ-<AREA>-NNN "
                              "in its spec page)")
            owner.setdefault(area, profile.name)


RULES = [canonical_profile_name, reserved_prefix, non_empty_text, summary_one_line,
         requirement_area_owned_once]
