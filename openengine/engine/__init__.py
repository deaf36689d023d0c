"""The OpenEngine reference engine: the SDK (`openengine.serve`) serving a small, deterministic
stand-in for a model, advertising exactly the profiles it is configured with.

    from openengine.engine import EngineConfig, RunningEngine
    with RunningEngine(EngineConfig(port=0, profiles=("load", "admin"))) as engine:
        ...  # connect to engine.address

`oespec engine` starts one from the command line.
"""

from openengine.contract import Catalogue, LimitInfo, ProfileInfo, RpcInfo, catalogue
from openengine.engine.config import (
    AdminConfig, ConfigError, EngineConfig, ModelConfig, ResolvedConfig, ResolvedModel, config_from_mapping,
    load_config_file, resolve_config,
)
from openengine.engine.faults import FAULTS, Fault
from openengine.engine.server import EngineServer, RunningEngine, serve

__all__ = [
    "AdminConfig", "Catalogue", "ConfigError", "EngineConfig", "EngineServer", "FAULTS", "Fault",
    "LimitInfo", "ModelConfig", "ProfileInfo", "ResolvedConfig", "ResolvedModel", "RpcInfo", "RunningEngine",
    "catalogue", "config_from_mapping", "load_config_file", "resolve_config", "serve",
]
