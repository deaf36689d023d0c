"""The violation record and the table of rules every validator reports against.

A rule is data: an id that never changes meaning, a short name, the spec requirement it enforces
and its severity. Generated and hand-written validators alike refer to rules by the constants
below, so `oespec validate`, the client helpers and the conformance runner print the same ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from openengine.contractkit.rules import RuleCatalogue, RuleSpec, Severity


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    requirement: str      # spec requirement id; "" when the rule is about the input itself, or
                          # when no numbered requirement states what it checks
    severity: Severity
    summary: str

    @property
    def spec(self) -> RuleSpec:
        category = {"OEV0": "input", "OEV1": "capabilities", "OEV3": "watchload", "OEV4": "preflight"}[self.id[:4]]
        return RuleSpec(self.id, self.name, "validator", category, self.summary, self.severity,
                        requirements=(self.requirement,) if self.requirement else ())


@dataclass(frozen=True, slots=True)
class Violation:
    """One finding: which rule, where (a field path in proto field names), what was found and
    what was expected."""

    rule_id: str
    path: str
    value: Any
    expected: str
    message: str
    requirement: str
    severity: Severity

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        req = f" [{self.requirement}]" if self.requirement else ""
        return f"{self.severity} {self.rule_id} {where}{self.message}{req}"


_E, _W, _I = Severity.ERROR, Severity.WARNING, Severity.INFO

# Every validator rule by id.
RULES: RuleCatalogue[Rule] = RuleCatalogue("validator")
for _rule in (
    # Input that is not a message of the expected type.
    Rule("OEV001", "json-syntax", "", _E, "the document is not valid JSON"),
    Rule("OEV002", "json-field", "", _E, "a field is unknown, given twice, or not in the proto3 JSON form of its type"),
    Rule("OEV003", "json-kind", "", _E, "the document is neither a capabilities document nor a WatchLoad stream"),
    # Capabilities: the profile list.
    Rule("OEV101", "core-missing", "REQ-CORE-001", _E, "openengine.core is not advertised"),
    Rule("OEV102", "profile-name", "REQ-CAP-001", _E, "a profile name is empty or not canonical"),
    Rule("OEV103", "profile-major", "REQ-CAP-002", _E, "a profile's major version is not positive"),
    Rule("OEV104", "profile-duplicate", "REQ-CAP-003", _E, "the same (name, major) is advertised twice"),
    Rule("OEV105", "profile-unknown", "REQ-CAP-004", _W, "an openengine.* profile the registry does not define"),
    Rule("OEV106", "profile-unknown-major", "REQ-CAP-004", _W, "a major version of a standard profile the registry does not define"),
    # Capabilities: capability messages and limits.
    Rule("OEV110", "capability-unadvertised", "REQ-CAP-006", _E, "a capability message is set for a profile that is not advertised"),
    Rule("OEV111", "limit-range", "REQ-CAP-008", _E, "a limit is outside its documented range"),
    Rule("OEV112", "limit-enum", "REQ-CAP-008", _E, "an enumerated limit holds a value the registry does not define"),
    Rule("OEV113", "limit-type", "REQ-CAP-008", _E, "a limit's value does not have the limit's type"),
    # Capabilities: combinations.
    Rule("OEV120", "prerequisite-missing", "REQ-CAP-010", _E, "a profile is advertised without a prerequisite at a satisfying version"),
    Rule("OEV121", "incompatible", "REQ-CAP-010", _E, "an incompatible combination of profiles and limit values is advertised"),
    # Scope, across Capabilities, ServerInfo and ModelInfo.
    Rule("OEV130", "role-scope", "REQ-CAP-011", _E, "a role-scoped profile is advertised by an engine of another role"),
    Rule("OEV131", "model-profile-not-engine-wide", "REQ-CAP-012", _E, "a model lists a profile the engine does not advertise"),
    Rule("OEV132", "model-capability-unlisted", "REQ-CAP-012", _E, "a model's capability message is set for a profile the model does not list"),
    Rule("OEV133", "model-profile-not-model-scoped", "REQ-CAP-012", _E, "a model lists a profile that is not model-scoped"),
    Rule("OEV134", "model-scoped-unused", "REQ-CAP-012", _E, "a model-scoped profile is advertised but no served model lists it"),
    Rule("OEV135", "revision-mismatch", "REQ-REV-001", _E, "capability revisions disagree between discovery answers"),
    Rule("OEV136", "server-info", "REQ-CORE-012", _E, "ServerInfo lacks a role, an instance id, a schema revision or a release"),
    Rule("OEV137", "model-entry", "REQ-CAP-012", _E, "a Capabilities.models entry names no served model, or one twice"),
    Rule("OEV138", "upstream-disagrees", "REQ-CAP-014", _E, "upstream's ServerInfo or ModelInfo reports a value a limit states differently"),
    # WatchLoad streams.
    Rule("OEV301", "watch-settings-first", "REQ-LOAD-004", _E, "the first message of a WatchLoad stream is not settings"),
    Rule("OEV302", "watch-settings-repeated", "REQ-LOAD-004", _E, "settings sent again after the first message"),
    Rule("OEV303", "watch-sequence-start", "REQ-LOAD-004", _E, "the settings do not carry sequence 0"),
    Rule("OEV304", "watch-sequence-order", "REQ-LOAD-014", _E, "a sequence number does not increase"),
    Rule("OEV305", "watch-sequence-gap", "REQ-LOAD-014", _E, "sequence numbers skip: messages were lost"),
    Rule("OEV306", "watch-timestamp-missing", "REQ-LOAD-014", _E, "a message has no timestamp"),
    Rule("OEV307", "watch-timestamp-backwards", "REQ-LOAD-014", _E, "a timestamp goes backwards"),
    Rule("OEV308", "watch-snapshot-incomplete", "REQ-LOAD-003", _E, "a snapshot lacks its load, timestamp or instance id"),
    Rule("OEV309", "watch-instance-id", "REQ-LOAD-002", _E, "an instance id differs from discovery or from the settings"),
    Rule("OEV310", "watch-interval-early", "REQ-LOAD-012", _E, "periodic snapshots closer together than the effective interval"),
    Rule("OEV311", "watch-interval-late", "REQ-LOAD-012", _E, "a periodic snapshot came later than the effective interval allows"),
    Rule("OEV312", "watch-heartbeat-missing", "REQ-LOAD-013", _E, "nothing arrived for longer than the effective heartbeat"),
    Rule("OEV313", "watch-heartbeat-early", "REQ-LOAD-013", _E, "a heartbeat came sooner than the heartbeat interval after the previous message"),
    Rule("OEV314", "watch-heartbeat-off", "REQ-LOAD-008", _E, "a heartbeat on a stream whose heartbeats are off"),
    Rule("OEV315", "watch-coalesced", "REQ-LOAD-016", _I, "the server coalesced updates into a snapshot"),
    Rule("OEV316", "watch-settings-effective", "REQ-LOAD-005", _E, "the settings are not the effective, clamped values"),
    Rule("OEV317", "watch-initial-snapshot", "REQ-LOAD-009", _E, "the message after the settings is not the promised initial snapshot"),
    Rule("OEV318", "watch-ranks", "REQ-LOAD-010", _E, "per-rank breakdown present although the stream's per_rank is false"),
    Rule("OEV319", "watch-revision", "REQ-LOAD-005", _E, "the settings' capability revision differs from discovery"),
    Rule("OEV320", "watch-empty-message", "REQ-LOAD-022", _E, "a message carries neither settings, snapshot nor heartbeat"),
    Rule("OEV321", "load-ranks-sum", "REQ-LOAD-023", _E, "a load total differs from the sum of its per-rank figures"),
    # Requests checked before they are sent.
    Rule("OEV401", "request-exceeds-limit", "REQ-CAP-009", _E, "a request field exceeds an advertised limit"),
    Rule("OEV402", "request-feature-off", "REQ-CAP-009", _E, "a request uses a feature the capabilities say is off"),
    Rule("OEV403", "request-profile-unadvertised", "REQ-CORE-004", _E, "a request needs a profile the engine does not advertise"),
    Rule("OEV404", "request-value-unadvertised", "REQ-CAP-009", _E, "a request uses a value the engine does not list"),
    Rule("OEV405", "request-model-profile", "REQ-CAP-013", _E, "a request needs a model-scoped profile its model does not list"),
    Rule("OEV406", "request-ignored", "REQ-CORE-006", _W, "a request sets a field the engine ignores"),
    Rule("OEV407", "request-number-not-finite", "REQ-SVC-005", _E, "a float or double in a request is NaN or infinite"),
    Rule("OEV408", "request-number-domain", "REQ-SVC-005", _E, "a request number is outside its field's domain"),
):
    RULES.register(_rule.spec, _rule)


def violation(rule_id: str, path: str, value: Any, expected: str, message: str) -> Violation:
    """A violation of `rule_id`, with the rule's requirement and severity filled in."""
    rule = RULES[rule_id]
    return Violation(rule_id, path, value, expected, message, rule.requirement, rule.severity)


# Rules a JSON Schema cannot express, checked by the Python validators only: duplicates by
# (name, major) (uniqueItems compares whole entries), conditions on effective limit values,
# anything spanning several discovery answers, and stream order and timing. Unknown standard
# names and majors are warnings here and accepted by the schemas, as clients must accept them.
PYTHON_ONLY_RULES = frozenset({
    "OEV104", "OEV105", "OEV106", "OEV121",
    "OEV130", "OEV131", "OEV133", "OEV134", "OEV135", "OEV136", "OEV137", "OEV138",
} | {rule for rule in RULES if rule.startswith(("OEV3", "OEV4"))})
