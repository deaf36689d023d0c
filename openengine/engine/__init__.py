"""The OpenEngine reference engine: a plain backend of the SDK (`openengine.serve`) serving a
small, deterministic stand-in for a model.

    from openengine.engine import EngineConfig, RunningEngine
    with RunningEngine(EngineConfig(port=0, profiles=("load", "admin"))) as engine:
        ...  # connect to engine.address

`oespec engine` starts one from the command line.
"""

from openengine.engine.reference_backend import ReferenceBackend
from openengine.engine.config import (
    ConfigError, EngineConfig, ModelConfig, check, config_from_mapping, load_config_file,
)
from openengine.engine.server import RunningEngine, serve, serve_config

__all__ = [
    "ConfigError", "EngineConfig", "ModelConfig", "ReferenceBackend", "RunningEngine", "check",
    "config_from_mapping", "load_config_file", "serve", "serve_config",
]
