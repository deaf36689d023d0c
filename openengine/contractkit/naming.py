"""Proto naming conventions the generators write and the runtime reads back.

One algorithm for the words of a CamelCase name, so an enum's value prefix is the same whether
the generator computes it from the registry or the runtime from a compiled descriptor. An acronym
stays one word: `GPUKind` -> `GPU_KIND`, `HTTP2Proxy` -> `HTTP2_PROXY`.
"""

from __future__ import annotations

import re

# A word ends before an upper-case letter that follows a lower-case letter or digit, and before
# the last capital of an acronym that starts a new word (`GPUKind`: between `U` and `K`).
_WORD_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")

# One word of a profile name: lower-case letters and digits, inner single hyphens.
_NAME_WORD = r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*"
# A canonical profile name (REQ-CAP-001): at least two dotted words (openengine.runtime-events).
# The registry rule OE003, the JSON Schemas and the validators' OEV102 all use this one pattern.
CANONICAL_NAME = rf"^{_NAME_WORD}(?:\.{_NAME_WORD})+$"

def snake_case(name: str) -> str:
    """`GuidedDecodingMode` -> `guided_decoding_mode`; `GPUKind` -> `gpu_kind`."""
    return _WORD_BOUNDARY.sub("_", name).lower()


def upper_snake_case(name: str) -> str:
    """`GuidedDecodingMode` -> `GUIDED_DECODING_MODE`; `GPUKind` -> `GPU_KIND`."""
    return _WORD_BOUNDARY.sub("_", name).upper()


def enum_value_prefix(enum_name: str) -> str:
    """The prefix proto style puts on every value of an enum: `PauseMode` -> `PAUSE_MODE_`."""
    return upper_snake_case(enum_name) + "_"


def enum_value_name(enum_name: str, spelling: str) -> str:
    """The enum value for a registry spelling: (`PauseMode`, `abort`) -> `PAUSE_MODE_ABORT`."""
    return enum_value_prefix(enum_name) + spelling.upper()


def enum_spelling(enum_name: str, value_name: str) -> str:
    """The registry spelling of an enum value: (`PauseMode`, `PAUSE_MODE_ABORT`) -> `abort`."""
    prefix = enum_value_prefix(enum_name)
    return (value_name[len(prefix):] if value_name.startswith(prefix) else value_name).lower()


def streaming_shape(client_streaming: bool, server_streaming: bool) -> str:
    """The registry's `streaming` word for an RPC's two streaming flags."""
    return {(False, False): "unary", (False, True): "server", (True, False): "client",
            (True, True): "bidi"}[(client_streaming, server_streaming)]


def streams_from_client(shape: str) -> bool:
    return shape in ("client", "bidi")


def streams_from_server(shape: str) -> bool:
    return shape in ("server", "bidi")
