"""The RPC implementations, one class per service, named as the contract names them.

Which RPCs exist and which profile each belongs to is not decided here: `server.py` routes every
method of the compiled services to the method of the same name in these modules and refuses it with
UNIMPLEMENTED when its profile (from the descriptor's `method_profile` option) is not advertised.
"""

from __future__ import annotations

from openengine.engine.services._base import Refused
from openengine.engine.services.adapters import Adapters
from openengine.engine.services.admin import Admin
from openengine.engine.services.discovery import Discovery
from openengine.engine.services.encoder import Encoder
from openengine.engine.services.inference import Inference
from openengine.engine.services.kv import Kv
from openengine.engine.services.lifecycle import Lifecycle
from openengine.engine.services.observability import Observability
from openengine.engine.services.sessions import Sessions
from openengine.engine.services.tasks import Tasks

__all__ = ["Refused", "SERVICES"]

SERVICES = {
    "openengine.v1.Discovery": Discovery, "openengine.v1.Inference": Inference,
    "openengine.v1.Lifecycle": Lifecycle, "openengine.v1.Observability": Observability,
    "openengine.v1.Kv": Kv, "openengine.v1.Tasks": Tasks, "openengine.v1.Encoder": Encoder,
    "openengine.v1.Sessions": Sessions, "openengine.v1.Adapters": Adapters, "openengine.v1.Admin": Admin,
}
