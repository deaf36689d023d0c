"""The runtime side of OpenEngine profiles: the Python bindings (`openengine.v1`, built by
`oespec generate`), and what clients, engines and the conformance runner use on the wire."""
