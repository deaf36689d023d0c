"""The registry rules, one module per concern. Importing this package registers all of them.

Ids are stable: a rule keeps its id for life and a removed rule's id is never reused.
OE001-OE002 YAML and schema, OE003-OE006 names and text, OE007-OE013 versions and history,
OE014-OE016 scope and the core, OE017-OE026 uniqueness and field numbers, OE027-OE031 limits,
OE032-OE033 RPCs, OE034-OE043 prerequisites and incompatibilities; later ids are numbered in the
order they were added (OE054: stability and deprecation). OE1xx compare with the protos.
"""

from oespec.check.rules import (  # noqa: F401  (each module registers its rules on import)
    yaml, names, versions, stability, scope, numbering, limits, rpcs, dependencies,
)
