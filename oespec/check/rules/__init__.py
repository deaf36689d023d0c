"""The registry rules, one module per concern. Importing this package registers all of them.

Ids are stable: a rule keeps its id for life and a removed rule's id is never reused. OE1xx
compare with the protos.
"""

from oespec.check.rules import (  # noqa: F401  (each module registers its rules on import)
    yaml, names, versions, stability, scope, numbering, limits, rpcs, dependencies,
)
