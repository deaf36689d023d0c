"""Test cases as data: an id, the profile it belongs to, the requirements it checks, a function.

A case is an `async def case(ctx) -> str | None` registered with `@case(...)`. It returns
normally to pass (optionally with a note), raises `Failed` when the engine broke a requirement,
`Skipped` when the requirement does not apply here (a feature the engine does not offer), and
`Unchecked` when it applies but the case could not make it observable (the engine's limits make
the stimulus impossible, a credential or an address was not given, a destructive case was not
asked for). Anything else it raises is an `error` outcome: the case could not reach a verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from openengine.contractkit.rules import RuleCatalogue, RuleSpec, Severity

CaseFn = Callable[["object"], Awaitable["str | None"]]

_ID_RE = re.compile(r"^[a-z][a-z0-9-]*(\.[a-z0-9][a-z0-9-]*)+$")
_REQ_RE = re.compile(r"^REQ-[A-Z][A-Z0-9]*-[0-9]{3}(\.[1-9][0-9]*)?$")   # a requirement, or one of its clauses


class Failed(Exception):
    """The engine did not do what the cited requirement says."""


class Skipped(Exception):
    """The requirement does not apply to this engine (a feature it does not offer)."""


class Unchecked(Exception):
    """The requirement applies, but this run could not observe it; the reason says why and, when
    an option would make it observable, which one. A run with unchecked requirements still
    conforms, but its verdict says how many were left unchecked."""


@dataclass(frozen=True)
class Case:
    id: str
    profile: str                      # full profile name; the case runs when it is advertised
    requirements: tuple[str, ...]
    title: str
    fn: CaseFn = field(compare=False, repr=False)
    # `absent`: runs when the profile is NOT advertised (honest absence).
    when: str = "advertised"
    # Cases that leave the engine unable to serve (drain, shutdown) run after all others.
    disruptive: bool = False
    timeout: float | None = None      # overrides the runner's per-case timeout


# Every case by id, in registration order (the order they run in).
CASES: RuleCatalogue[Case] = RuleCatalogue("conformance")


def case(case_id: str, *, profile: str, requires: tuple[str, ...] | list[str], title: str,
         when: str = "advertised", disruptive: bool = False,
         timeout: float | None = None) -> Callable[[CaseFn], CaseFn]:
    """Register a case. Ids and citations are checked here so a typo fails at import."""
    if not _ID_RE.match(case_id):
        raise ValueError(f"case id {case_id!r} is not dotted lower-case words")
    if not requires:
        raise ValueError(f"case {case_id} cites no requirement")
    for req in requires:
        if not _REQ_RE.match(req):
            raise ValueError(f"case {case_id} cites malformed requirement id {req!r}")
    if when not in ("advertised", "absent"):
        raise ValueError(f"case {case_id}: unknown when={when!r}")
    # As a catalogue entry, a failed case is an error against the requirements it cites.
    facts = (("profile", profile), ("when", when), ("disruptive", "yes" if disruptive else "no"))
    spec = RuleSpec(case_id, case_id.replace(".", "-"), "conformance", profile.removeprefix("openengine."),
                    title, Severity.ERROR, requirements=tuple(requires), facts=facts)
    return CASES.registrar(spec, lambda fn: Case(case_id, profile, tuple(requires), title, fn, when, disruptive,
                                                 timeout))


def expect(condition: bool, reason: str) -> None:
    """Fail the case with `reason` unless `condition` holds."""
    if not condition:
        raise Failed(reason)


def expect_no(problems: list, prefix: str = "") -> None:
    """Fail the case with every problem found (a None entry is none)."""
    found = [p for p in problems if p]
    if found:
        raise Failed(prefix + "; ".join(found))
