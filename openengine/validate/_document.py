"""Capability documents in proto3 JSON: a bare `Capabilities`, or a document holding the
discovery answers together.

A combined document is a JSON object with these keys (proto field names or lowerCamel JSON names):

    {"capabilities": {...Capabilities...},
     "server_info":  {...ServerInfo...},              (optional)
     "model_info":   {...ModelInfo...} | [{...}, ...]} (optional; one object or a list)

Anything else at the top level is read as a bare `Capabilities`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from openengine.validate._json import message_from_json
from openengine.validate._rules import Violation, violation

_KEYS = {"capabilities": "capabilities", "server_info": "server_info", "serverInfo": "server_info",
         "model_info": "model_info", "modelInfo": "model_info"}


@dataclass
class CapabilityDocument:
    capabilities: Any
    server_info: Any = None
    model_infos: list = field(default_factory=list)


def is_combined(obj: Any) -> bool:
    return isinstance(obj, dict) and "capabilities" in obj


def document_from_json(obj: Any) -> tuple[CapabilityDocument, list[Violation]]:
    """Convert a capabilities document (bare or combined) to messages, reporting every bad field."""
    from openengine.v1 import capabilities_pb2, model_pb2, server_pb2

    if not is_combined(obj):
        caps, errors = message_from_json(obj, capabilities_pb2.Capabilities)
        return CapabilityDocument(caps), errors
    errors: list[Violation] = []
    seen: dict[str, str] = {}
    doc = CapabilityDocument(capabilities_pb2.Capabilities())
    for key, value in obj.items():
        name = _KEYS.get(key)
        if name is None:
            errors.append(violation("OEV002", key, value, "capabilities, server_info or model_info",
                                    f"a capabilities document has no key {key!r}"))
            continue
        if name in seen:
            errors.append(violation("OEV002", name, value, "the key once",
                                    f"{name} is given twice (as {seen[name]!r} and {key!r})"))
            continue
        seen[name] = key
        if name == "capabilities":
            doc.capabilities, errs = message_from_json(value, capabilities_pb2.Capabilities, path="capabilities")
        elif name == "server_info":
            doc.server_info, errs = message_from_json(value, server_pb2.ServerInfo, path="server_info")
        else:
            items = value if isinstance(value, list) else [value]
            errs = []
            for i, item in enumerate(items):
                info, e = message_from_json(item, model_pb2.ModelInfo, path=f"model_info[{i}]")
                doc.model_infos.append(info)
                errs += e
        errors += errs
    return doc, errors
