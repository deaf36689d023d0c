"""Suite-wide collection order: the modules that hold slow tests run first.

pytest-xdist hands tests to its workers in collection order, so a long module collected last
would start when the other workers are already idle and set the run's wall time on its own.
Moving whole modules keeps each module's tests together, so module-scoped fixtures (engines,
built sites, temporary checkouts) are still set up once per worker."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    first_seen: dict[str, int] = {}
    slow_modules: set[str] = set()
    for index, item in enumerate(items):
        module = item.nodeid.split("::", 1)[0]
        first_seen.setdefault(module, index)
        if item.get_closest_marker("slow") is not None:
            slow_modules.add(module)
    order = {nodeid: index for index, nodeid in enumerate(item.nodeid for item in items)}
    items.sort(key=lambda item: (item.nodeid.split("::", 1)[0] not in slow_modules,
                                 first_seen[item.nodeid.split("::", 1)[0]], order[item.nodeid]))
