"""Check stage: the semantic rules of the registry.

Each rule is data plus a function: a stable id, a name, a severity, a one-line purpose, and a
handler that receives the resolved registry (and its source, for rules about the YAML itself) and
yields findings. Rules live in `oespec.check.rules` and register in `CATALOGUE`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from openengine.contractkit.diagnostics import Diagnostic, Loc, Severity, sorted_diagnostics
from openengine.contractkit.rules import RuleCatalogue, RuleSpec, SpecFacts
from oespec.registry import Registry, Resolved, SourceFile

if TYPE_CHECKING:
    from oespec.check.contract import Contract
    from oespec.check.head import HeadState


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
    head: "HeadState | None" = None


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
    needs_head: bool = False


# Every id `oespec check` can emit. The rule modules register their handlers with `@rule`; the two
# ids no handler yields are registered as specs alone: the loader's verdict on unusable input and
# the protoc compile of the contract. They are findings like any other, so they are catalogued.
CATALOGUE: RuleCatalogue[Rule] = RuleCatalogue("check", (
    RuleSpec("OE000", "registry-unusable", "check", "input", "the registry file can be read and parsed as YAML "
             "(a missing file, a YAML syntax error or a duplicate key stops the check here)", Severity.ERROR),
    RuleSpec("OE100", "contract-compiles", "check", "contract", "the protos under proto/ compile (protoc "
             "errors are reported at their source line)", Severity.ERROR),
))


def rule(id: str, name: str, *, severity: Severity = Severity.ERROR, category: str, purpose: str,
         needs_model: bool = True, needs_contract: bool = False, requirements: tuple[str, ...] | str = (),
         needs_head: bool = False):
    """Register a rule handler under a stable id."""
    cited = (requirements,) if isinstance(requirements, str) else tuple(requirements)
    spec = RuleSpec(id, name, "check", category, purpose, severity, requirements=cited)
    return CATALOGUE.registrar(spec, lambda handler: Rule(spec, handler, needs_model, needs_contract, needs_head))


def run_rules(resolved: Resolved, *, rules: Iterable[Rule] | None = None,
              contract: "Contract | None" = None, head: "HeadState | None" = None) -> list[Diagnostic]:
    """Every finding of the schema stage and of every rule, sorted by position.

    With a `contract` (see `oespec.check.contract.load_contract`), the rules that cross-check the
    registry against the compiled protos run too.
    """
    _register_all()
    diags = list(resolved.diagnostics)
    ctx = CheckContext(resolved.registry, resolved.source, contract, head)
    for r in rules if rules is not None else iter_rules():
        if (r.needs_model and resolved.registry is None) or (r.needs_contract and contract is None) \
                or (r.needs_head and head is None):
            continue
        for finding in r.handler(ctx):
            diags.append(Diagnostic.at(finding.path or resolved.source.path, finding.loc, r.id,
                                       r.severity, finding.message, finding.hint))
    return sorted_diagnostics(diags)


def _register_all() -> None:
    from oespec.check import contract as _contract  # noqa: F401  (registers the contract rules)
    from oespec.check import rules as _rules  # noqa: F401  (registers the registry rules)


def iter_rules() -> Iterator[Rule]:
    """Every rule with a handler, in id order."""
    _register_all()
    yield from CATALOGUE.payloads(by_id=True)


def catalogue() -> RuleCatalogue[Rule]:
    """Every id `oespec check` can emit: the rules with their handlers and the stage ids."""
    _register_all()
    return CATALOGUE
