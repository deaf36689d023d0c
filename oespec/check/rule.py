"""What a check rule is: data plus a function. A stable id, a name, a severity, a one-line purpose,
and a handler that receives the resolved registry (and its source, for rules about the YAML itself)
and yields findings. `@rule(...)` turns a handler into a `Rule`; each rule module lists its rules in
`RULES`, and `oespec.check` puts the lists together. Nothing registers itself on import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable

from openengine.contractkit.locations import Loc
from openengine.contractkit.rules import Severity
from openengine.contractkit.rules import RuleSpec, SpecFacts
from oespec.registry import Registry, SourceFile

if TYPE_CHECKING:
    from oespec.check.last_commit import LastCommit
    from oespec.descriptors import Contract


@dataclass(frozen=True)
class Finding:
    """What a rule handler yields; the runner adds the rule id and the severity, and the registry
    file unless the finding names another file (a .proto file, for the contract rules)."""

    loc: Loc
    message: str
    hint: str = ""
    path: str | None = None


@dataclass(frozen=True)
class CheckContext:
    registry: Registry | None
    source: SourceFile
    # The compiled wire contract, for the rules that cross-check the registry against it; None
    # when the check runs on a registry alone.
    contract: "Contract | None" = None
    # The registry and protos as the last commit has them (`oespec check` in a git checkout).
    last_commit: "LastCommit | None" = None


Handler = Callable[[CheckContext], Iterable[Finding]]


@dataclass(frozen=True)
class Rule(SpecFacts):
    """A check rule: its catalogue entry plus the handler and when it can run."""

    spec: RuleSpec
    handler: Handler
    # Rules about the YAML text itself run even when the schema stage failed.
    needs_model: bool = True
    # Rules that compare the registry with the compiled protos run only when those are given.
    needs_contract: bool = False
    # Rules that compare the working tree with the last commit run only when that is given.
    needs_last_commit: bool = False


def rule(id: str, name: str, *, severity: Severity = Severity.ERROR, category: str, purpose: str,
         needs_model: bool = True, needs_contract: bool = False, requirements: tuple[str, ...] | str = (),
         needs_last_commit: bool = False) -> Callable[[Handler], Rule]:
    """The check rule made of the decorated handler, under a stable id."""
    cited = (requirements,) if isinstance(requirements, str) else tuple(requirements)
    spec = RuleSpec(id, name, "check", category, purpose, severity, requirements=cited)
    return lambda handler: Rule(spec, handler, needs_model, needs_contract, needs_last_commit)
