"""Check stage: the semantic rules of the registry, and its cross-check against the compiled protos.

A rule (`oespec.check.rule.Rule`) is a catalogue entry plus a handler. The registry rules are
listed in `oespec.check.rules.RULES`, the cross-check's in `oespec.check.proto_crosscheck.RULES`; the
catalogue below is those lists and the two ids no handler yields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from openengine.contractkit.diagnostics import Diagnostic, sorted_diagnostics
from openengine.contractkit.rules import Severity
from openengine.contractkit.rules import RuleCatalogue, RuleSpec
from oespec.check import proto_crosscheck, rules as registry_rules
from oespec.check.rule import CheckContext, Finding, Rule
from oespec.registry import Resolved
from oespec.registry.resolve import SCHEMA_RULE

if TYPE_CHECKING:
    from oespec.check.last_commit import LastCommit
    from oespec.descriptors import Contract

# The ids no handler yields: the loader's verdict on unusable input, the schema stage's findings
# and the protoc compile of the contract. They are findings like any other, so they are catalogued.
STAGE_SPECS = (
    RuleSpec("OE000", "registry-unusable", "check", "input", "the registry file can be read and parsed as YAML "
             "(a missing file, a YAML syntax error or a duplicate key stops the check here)", Severity.ERROR),
    RuleSpec(SCHEMA_RULE, "schema", "check", "schema", "profiles.yaml follows the registry's JSON Schema (keys, "
             "types, required fields)", Severity.ERROR,
             requirements=("REQ-ADD-003", "REQ-ADD-004", "REQ-ADD-010", "REQ-VER-007")),
    RuleSpec("OE100", "contract-compiles", "check", "contract", "the protos under proto/ compile (protoc "
             "errors are reported at their source line)", Severity.ERROR),
)
RULES: list[Rule] = sorted([*registry_rules.RULES, *proto_crosscheck.RULES], key=lambda r: r.id)


def catalogue() -> RuleCatalogue[Rule]:
    """Every id `oespec check` can emit: the rules with their handlers and the stage ids."""
    cat: RuleCatalogue[Rule] = RuleCatalogue("check", STAGE_SPECS)
    for r in RULES:
        cat.register(r.spec, r)
    return cat


def run_rules(resolved: Resolved, *, rules: Iterable[Rule] | None = None,
              contract: "Contract | None" = None, last_commit: "LastCommit | None" = None) -> list[Diagnostic]:
    """Every finding of the schema stage and of every rule, sorted by position.

    With a `contract` (see `oespec.check.proto_crosscheck.load_contract`), the rules that cross-check the
    registry against the compiled protos run too.
    """
    diags = list(resolved.diagnostics)
    ctx = CheckContext(resolved.registry, resolved.source, contract, last_commit)
    for r in rules if rules is not None else RULES:
        if (r.needs_model and resolved.registry is None) or (r.needs_contract and contract is None) \
                or (r.needs_last_commit and last_commit is None):
            continue
        for finding in r.handler(ctx):
            diags.append(Diagnostic.at(finding.path or resolved.source.path, finding.loc, r.id,
                                       r.severity, finding.message, finding.hint))
    return sorted_diagnostics(diags)


__all__ = ["CheckContext", "Finding", "RULES", "Rule", "catalogue", "run_rules"]
