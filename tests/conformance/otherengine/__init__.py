"""A second, independent test engine for the conformance runner (see engine.py)."""

from tests.conformance.otherengine.engine import Bugs, OtherEngine, Timing

__all__ = ["Bugs", "OtherEngine", "Timing"]
