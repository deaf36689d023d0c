"""A second OpenEngine engine written only from upstream v1's protos, standing for an engine of
today's layout (what TensorRT-LLM serves): upstream's `openengine.v1.Inference` and
`openengine.v1.Control`, none of the proposal's services, on a `grpc.aio` server of its own with
a toy byte model (model.py). It runs in a `python -S` child whose `openengine` package is stubs
generated from the pinned image `upstream/openengine-v1.binpb`; nothing here imports the
project's own package.

- launch.py: `generate_stubs(dir)`, `start_upstream_engine(stubs, variant=None, **options)`
  -> (address, process), `stop_upstream_engine(process)`, and by hand
  `python -m tests.conformance.upstream_engine.launch [--variant NAME] [engine options]`.
- engine.py: the child's entry point and its flags (`--list-variants` prints the defects).
- variants.py: the defects, one line each, planted one at a time with `--variant NAME`.
- driver.py: a revision-1 client on the same stubs that the self-test uses to judge it.
"""
