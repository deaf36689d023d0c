"""The registry rules, one module per concern, each listing its rules in `RULES`.

Ids are stable: a rule keeps its id for life and a removed rule's id is never reused. OE1xx
compare with the protos (`oespec.check.proto_crosscheck`).
"""

from oespec.check.rules import dependencies, limits, names, numbering, rpcs, scope, versions, yaml

RULES = [*yaml.RULES, *names.RULES, *versions.RULES, *scope.RULES, *numbering.RULES,
         *limits.RULES, *rpcs.RULES, *dependencies.RULES]
