"""Versions: positive majors, a history that records every version in order, `since` values
that name a recorded version no newer than the profile, and a stated `stability` that agrees with
`deprecated`."""

from __future__ import annotations

import re

from oespec.check.rule import CheckContext, Finding, rule
from oespec.check.rules._common import versioned_elements
from openengine.contractkit.rules import Severity
from openengine.contractkit.versions import Version


@rule("OE007", "major-version", requirements=("REQ-ADD-002",), category="versions",
      purpose="profile, history and since versions have a major of at least 1 (0.x is not a release)")
def major_version(ctx: CheckContext):
    hint = "profiles start at 1.0; an experimental feature belongs in a vendor profile until then"
    for profile in ctx.registry.profiles:
        if profile.version.major < 1:
            yield Finding(profile.at("version"), f"{profile.name}: version {profile.version} has major 0", hint)
        for entry in profile.history:
            if entry.version.major < 1:
                yield Finding(entry.at("version"), f"{profile.name}: history version {entry.version} has major 0", hint)
        for kind, element in versioned_elements(profile):
            if element.since.major < 1:
                yield Finding(element.at("since"),
                              f"{profile.name}: {kind} {element.name} since {element.since} has major 0", hint)


@rule("OE008", "history-current", requirements=("REQ-ADD-002", "REQ-VER-004"), category="versions",
      purpose="the history has an entry for the profile's current version")
def history_current(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        if all(entry.version != profile.version for entry in profile.history):
            yield Finding(profile.at("history"),
                          f"{profile.name}: the history has no entry for the current version {profile.version}",
                          f"add `- version: \"{profile.version}\"` with the changes it made")


@rule("OE009", "history-order", requirements=("REQ-VER-004",), category="versions",
      purpose="history versions are strictly increasing: oldest first, none repeated")
def history_order(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        seen: dict[Version, int] = {}
        previous: Version | None = None
        for entry in profile.history:
            if entry.version in seen:
                yield Finding(entry.at("version"),
                              f"{profile.name}: history version {entry.version} repeats the entry at line {seen[entry.version]}",
                              "merge the two entries into one")
            elif previous is not None and entry.version < previous:
                yield Finding(entry.at("version"),
                              f"{profile.name}: history version {entry.version} comes after {previous}",
                              "list history entries oldest first")
            seen.setdefault(entry.version, entry.at("version").line)
            previous = entry.version if previous is None else max(previous, entry.version)


@rule("OE010", "history-not-newer", requirements=("REQ-VER-004",), category="versions",
      purpose="no history entry is newer than the profile's current version")
def history_not_newer(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        for entry in profile.history:
            if entry.version > profile.version:
                yield Finding(entry.at("version"),
                              f"{profile.name}: history version {entry.version} is newer than the current version {profile.version}",
                              "raise the profile's version, or correct the history entry")


@rule("OE011", "since-not-newer", requirements=("REQ-ADD-002", "REQ-VER-005"), category="versions",
      purpose="the `since` of every RPC, message and limit is no newer than its profile's version")
def since_not_newer(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        for kind, element in versioned_elements(profile):
            if element.since > profile.version:
                yield Finding(element.at("since"),
                              f"{profile.name}: {kind} {element.name} is since {element.since}, newer than the profile's version {profile.version}",
                              "raise the profile's version (and add a history entry), or correct `since`")


@rule("OE012", "since-in-history", requirements=("REQ-ADD-002",), category="versions",
      purpose="the `since` of every RPC, message and limit names a version the history records")
def since_in_history(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        recorded = {entry.version for entry in profile.history}
        for kind, element in versioned_elements(profile):
            # A `since` newer than the profile is OE011's finding.
            if element.since <= profile.version and element.since not in recorded:
                yield Finding(element.at("since"),
                              f"{profile.name}: {kind} {element.name} is since {element.since}, which has no history entry",
                              "add the history entry that introduced it, or correct `since`")


def _gaps(versions: list[Version]):
    """(version, what was expected before it) for each skipped release."""
    previous = None
    for version in versions:
        if previous is None:
            if version.minor != 0:
                yield version, f"{version.major}.0"
        elif version.major == previous.major and version.minor != previous.minor + 1:
            yield version, f"{previous.major}.{previous.minor + 1}"
        elif version.major > previous.major and (version.major != previous.major + 1 or version.minor != 0):
            yield version, f"{previous.major + 1}.0"
        previous = version


@rule("OE013", "history-gap", requirements=("REQ-VER-004",), severity=Severity.WARNING, category="versions",
      purpose="the history records every release: minors count up by one and a major starts at .0")
def history_gap(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        ordered = sorted({entry.version for entry in profile.history})
        first_entry = {entry.version: entry for entry in reversed(profile.history)}
        for version, expected in _gaps(ordered):
            yield Finding(first_entry[version].at("version"),
                          f"{profile.name}: history jumps to {version}; {expected} is not recorded",
                          "add the missing release to the history, or correct the version")


_ADDS = r"\b(?:add|adds|added|adding|introduces?|introduced|introducing)\s+(?:the\s+|a\s+)?(?:new\s+)?"


def _mention_names(kind: str, element) -> tuple[str, ...]:
    """How a history text names an element: a limit or message by name, an RPC by method or full name."""
    if kind == "rpc":
        return (element.name, element.method)
    return (element.name, element.name.rsplit(".", 1)[-1])


def _name_pattern(names: tuple[str, ...], prefix: str = "") -> re.Pattern:
    alternatives = "|".join(re.escape(n) for n in names if n)
    return re.compile(prefix + r"(?<![\w.])(?:" + alternatives + r")(?![\w])", re.IGNORECASE if prefix else 0)


def _mentions(text: str, names: tuple[str, ...] | re.Pattern) -> list[str]:
    """The sentences of `text` that name the element (its names, or their `_name_pattern`)."""
    sentences = re.split(r"(?<=[.;])\s+|\n+", text)
    pattern = names if isinstance(names, re.Pattern) else _name_pattern(names)
    return [s for s in sentences if pattern.search(s)]


@rule("OE051", "history-contradicts-since", category="versions", requirements=("REQ-ADD-002", "REQ-VER-005"),
      purpose="a history entry that names an RPC, message or limit agrees with its `since` (it is not "
              "mentioned before it existed, nor said to be added in another version)")
def history_contradicts_since(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        # One pattern per element, not per element and entry: the rule stays linear in the registry.
        patterns = [(kind, element, _name_pattern(_mention_names(kind, element)))
                    for kind, element in versioned_elements(profile)]
        for entry in profile.history:
            for kind, element, pattern in patterns:
                for sentence in _mentions(entry.changes, pattern):
                    if entry.version < element.since:
                        why = f"mentions {kind} {element.name}, which is since {element.since}"
                    # "Adds max_queue", "Added the new WatchLoad": the sentence says the element is added.
                    elif entry.version > element.since and \
                            _name_pattern(_mention_names(kind, element), _ADDS).search(sentence):
                        why = f"says {kind} {element.name} is added, but it is since {element.since}"
                    else:
                        continue
                    yield Finding(entry.at("changes"), f"{profile.name}: history {entry.version} {why}",
                                  f"correct `since` to {entry.version}, or the history entry (published "
                                  "entries are corrected in the next version's entry)")
                    break


@rule("OE052", "since-without-history-mention", severity=Severity.WARNING, category="versions",
      requirements=("REQ-ADD-002",),
      purpose="an RPC, message or limit added after a profile's first version is named by the history "
              "entry of its `since`")
def since_without_history_mention(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        if not profile.history:
            continue
        first = min(entry.version for entry in profile.history)
        entries = {entry.version: entry for entry in profile.history}
        for kind, element in versioned_elements(profile):
            entry = entries.get(element.since)
            if element.since == first or entry is None:
                continue  # the first version introduces everything in it; a missing entry is OE012's
            if not _mentions(entry.changes, _mention_names(kind, element)):
                name = element.method if kind == "rpc" else element.name
                yield Finding(element.at("since"),
                              f"{profile.name}: {kind} {element.name} is since {element.since}, but the history "
                              f"entry {element.since} does not mention it",
                              f"name {name} in the changes of {element.since} (line {entry.at('changes').line}) while "
                              "that version is unpublished; the history says what each version added")


@rule("OE053", "revision-not-bumped", severity=Severity.WARNING, category="versions",
      requirements=("REQ-VER-006",), needs_last_commit=True,
      purpose="when profiles.yaml or a proto differs from the last commit, `registry.revision` is above "
              "the committed one (so the pull request does not learn it from `oespec breaking`)")
def revision_not_bumped(ctx: CheckContext):
    head = ctx.last_commit
    registry = ctx.registry
    if head is None or head.revision is None or not head.changed or registry.revision > head.revision:
        return
    shown = ", ".join(head.changed[:3]) + (f" and {len(head.changed) - 3} more" if len(head.changed) > 3 else "")
    yield Finding(registry.at("revision"),
                  f"{shown} differ{'s' if len(head.changed) == 1 else ''} from the last commit, but "
                  f"registry.revision is still {registry.revision} (the committed one is {head.revision})",
                  f"set registry.revision to {head.revision + 1}; every change to the registry or the "
                  "protos, editorial ones included, gets a new revision")


@rule("OE054", "stability-matches-deprecated", requirements=("REQ-VER-013",), category="versions",
      purpose="a profile's `stability` is `deprecated` exactly when the profile gives a `deprecated` "
              "reason (neither one without the other)")
def stability_matches_deprecated(ctx: CheckContext):
    for profile in ctx.registry.profiles:
        stated = profile.stability_given
        # Without `stability:` the stability follows from `deprecated`, so nothing can disagree.
        if not stated:
            continue
        if stated == "deprecated" and not profile.deprecated:
            yield Finding(profile.at("stability"),
                          f"{profile.name}: stability is deprecated, but the profile gives no `deprecated` reason",
                          "add `deprecated: <why, and what replaces it>` (deprecation is explicit), or "
                          "set stability to experimental or stable")
        elif stated != "deprecated" and profile.deprecated:
            yield Finding(profile.at("stability"),
                          f"{profile.name}: stability is {stated}, but the profile is deprecated "
                          f"(line {profile.at('deprecated').line})",
                          "set `stability: deprecated` or leave stability out (it follows from `deprecated`); "
                          "drop `deprecated` only when the deprecation is withdrawn")


RULES = [major_version, history_current, history_order, history_not_newer, since_not_newer, since_in_history,
         history_gap, history_contradicts_since, since_without_history_mention, revision_not_bumped,
         stability_matches_deprecated]
