"""The upstream pin's tests; the client tests use upstream's stubs, generated once per session."""

from tests.interop.stubs import upstream_stubs  # noqa: F401  (the session fixture)
