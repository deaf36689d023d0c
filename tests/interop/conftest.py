"""Interop tests: clients generated from upstream's pinned protos, run in processes of their own."""

from tests.interop.stubs import upstream_stubs  # noqa: F401  (the session fixture)
