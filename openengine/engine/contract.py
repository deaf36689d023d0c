"""The contract as the reference engine uses it.

The catalogue itself (profiles, RPCs, typed limits) is read from the compiled descriptors by
`openengine.contract`, shared with the conformance runner; this module adds what only the engine
needs: turning configured values into checked limit values and capability message fields.
Prerequisites and incompatible combinations are judged by `openengine.contract.combination_problems`
from the compiled descriptors, like every other contract fact.
"""

from __future__ import annotations



from openengine.contract import (  # noqa: F401  (re-exported: the engine's view of the contract)
    HEALTH_SERVICE, STANDARD_PREFIX, Catalogue, LimitInfo, ProfileInfo, RpcInfo, catalogue, combination_problems,
    role_numbers,
)

from openengine.serve.limits import coerce, to_wire  # noqa: F401  (re-exported)

INFERENCE = "openengine.v1.Inference"
ADMIN = "openengine.v1.Admin"

# Role spelling -> Role enum number, read from the enum.
ROLE_NAMES = role_numbers()
