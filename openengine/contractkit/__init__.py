"""The lower layers the runtime is built on, and the toolkit (`oespec`) reuses.

Profile versions and version ranges, the meaning of a limit condition, proto naming conventions,
proto3 JSON forms, the rule catalogue and the one diagnostic record with its printers. Nothing
here imports the rest of `openengine`, and nothing in `openengine` imports `oespec`.
"""
