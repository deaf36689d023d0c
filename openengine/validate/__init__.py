"""Validators for what an OpenEngine engine advertises and streams, driven by the compiled contract.

    from openengine.validate import validate_capabilities, WatchLoadChecker, preflight

    report = validate_capabilities(caps, server_info=info, model_infos=[model])
    report.violations        # every violation: rule id, field path, value, expected, requirement
    report.effective("openengine.core", "max_logprobs")

    checker = WatchLoadChecker(instance_id=info.instance_id, observability=report.limits["openengine.load"])
    for msg in stream: checker.feed(msg)

    preflight(generate_request, report)   # [] when the engine would accept it

Messages are protobuf messages (`openengine.v1.*_pb2`); proto3 JSON (as grpcurl prints it) is
converted first with `message_from_json` / `document_from_json`, which report bad fields as
violations too. Rule ids are listed in `RULES`.
"""

from openengine.validate._capabilities import (
    UPSTREAM_CORE_FIELDS, CapabilityReport, ModelReport, check_capabilities, check_server_info,
    from_upstream, upstream_core_values, validate_capabilities,
)
from openengine.validate._document import CapabilityDocument, document_from_json, is_combined
from openengine.validate._tables import DEFAULTS, MODEL_SCOPED
from openengine.validate._json import message_from_json
from openengine.validate._preflight import (
    NUMBER_DOMAINS, PROBLEMS_LISTED, REQUEST_LIMITS, NumberDomain, RequestLimit, number_violations, preflight,
)
from openengine.validate._rules import PYTHON_ONLY_RULES, RULES, Rule, Severity, Violation
from openengine.validate._watch import RANK_SUMMED_FIELDS, WatchLoadChecker, check_load, effective_watch_settings

__all__ = [
    "CapabilityDocument", "CapabilityReport", "DEFAULTS", "MODEL_SCOPED", "ModelReport",
    "NUMBER_DOMAINS", "NumberDomain", "PROBLEMS_LISTED", "PYTHON_ONLY_RULES", "RANK_SUMMED_FIELDS", "REQUEST_LIMITS", "RULES", "RequestLimit", "Rule", "Severity", "Violation",
    "UPSTREAM_CORE_FIELDS", "WatchLoadChecker", "check_capabilities", "check_load", "check_server_info", "document_from_json",
    "effective_watch_settings", "from_upstream", "is_combined", "message_from_json", "number_violations", "preflight", "upstream_core_values", "validate_capabilities",
]
