"""The lower layers both sides of the toolkit build on.

`openengine` (the runtime: engine, runner, validators, client) and `codegen` (registry, checks,
generators) never import each other; what both need sits here, below them: profile versions and
version ranges, the meaning of a limit condition, proto naming conventions, the protoc wrapper
and the descriptor model. Nothing here imports either side.
"""
