"""Load stage of the registry: the located loader every input file shares
(`openengine.contractkit.yamlsource`), under the name the registry stages import it by."""

from openengine.contractkit.yamlsource import (  # noqa: F401
    MAX_DEPTH, MAX_NODES, SourceError, SourceFile, YMap, YNode, YScalar, YSeq, parse_text, read_file,
)
