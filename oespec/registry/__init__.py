"""The profile registry: load (YAML with locations), resolve (schema + typed model)."""

from oespec.registry.model import (
    Capability, Condition, HistoryEntry, Incompatibility, Limit, LimitType, MessageRef, Profile,
    Registry, Requirement, Rpc, Scope, Version, VersionRange,
)
from oespec.registry.resolve import Resolved, build_registry, resolve
from openengine.contractkit.yamlsource import SourceError, SourceFile, parse_text, read_file

DEFAULT_REGISTRY = "profiles.yaml"


def load_registry(path="profiles.yaml", *, display_path: str | None = None) -> Resolved:
    """Read, parse and resolve a registry file. Raises `SourceError` only for unusable input."""
    return resolve(read_file(path, display_path))


def load_registry_text(text: str, path: str = "profiles.yaml") -> Resolved:
    return resolve(parse_text(text, path))


__all__ = [
    "Capability", "Condition", "HistoryEntry", "Incompatibility", "Limit", "LimitType", "MessageRef",
    "Profile", "Registry", "Requirement", "Resolved", "Rpc", "Scope", "SourceError", "SourceFile",
    "Version", "VersionRange", "build_registry", "load_registry", "load_registry_text", "parse_text", "read_file",
    "resolve", "DEFAULT_REGISTRY",
]
