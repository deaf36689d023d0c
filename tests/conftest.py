"""Suite-wide scheduling: the heavy end-to-end tests get workers of their own, the slow tests start
first, and those that mostly wait get workers of their own too.

The end-to-end tests (`END_TO_END`: adding a profile, the pull-request workflow, the install
outside the checkout, the browser against the built site) each run the project's own commands:
make, pip, mkdocs, a browser, in copies of the checkout. Under pytest-xdist they form three
`xdist_group`s of about equal length, each run by one worker one test after the other, sharing
that worker's copy of the checkout (`shared_checkout`).

pytest-xdist hands tests to its workers in collection order, so a long module collected last
would start when the other workers are already idle and set the run's wall time on its own: the
modules holding slow tests move first, each keeping its tests together and in order.

Slow tests are of two kinds. Most of a conformance or fault test's time is spent waiting on
stream windows and timers (modules marked `waits`), while a site build or a pull-request step
keeps a core busy. With more workers than cores, the waiting slow tests are shared out into
`xdist_group`s, one for each worker beyond one per core and the end-to-end groups, so they wait
beside the computing ones; the long ones (whole suites) are placed first, so no group ends long
after the others.
"""

from __future__ import annotations

import gc
import os

import pytest

from tests.checkout import NotSetUp, make_shared_checkout, once_per_run


def _module(item) -> str:
    return item.nodeid.split("::", 1)[0]


def slow_modules_first(items: list) -> list:
    """Modules holding a slow test first; otherwise, and within each module, collection order."""
    slow = {_module(item) for item in items if item.get_closest_marker("slow") is not None}
    return [i for i in items if _module(i) in slow] + [i for i in items if _module(i) not in slow]


# A waiting test of a module with fewer waiting tests than this is taken for a long one (a
# whole suite, or a matrix of faults run side by side); one of a larger module for a short one
# (a fuzzed message).
MANY = 12
LONG_WEIGHT = 10


def waiting_groups(items: list, count: int) -> dict[str, list]:
    """The slow tests of modules marked `waits`, in `count` groups (none for 0) of about equal
    expected length: the long ones first, each test to the group expected to end first."""
    if count == 0:
        return {}
    waits = {_module(item) for item in items if item.get_closest_marker("waits") is not None}
    waiting = [i for i in items if _module(i) in waits and i.get_closest_marker("slow") is not None]
    per_module: dict[str, int] = {}
    for item in waiting:
        per_module[_module(item)] = per_module.get(_module(item), 0) + 1
    weight = {id(i): LONG_WEIGHT if per_module[_module(i)] < MANY else 1 for i in waiting}
    groups: dict[str, list] = {f"waiting-{k}": [] for k in range(count)}
    expected = dict.fromkeys(groups, 0)
    for item in sorted(waiting, key=lambda i: -weight[id(i)]):     # stable: collection order within
        name = min(expected, key=expected.get)
        groups[name].append(item)
        expected[name] += weight[id(item)]
    return {name: members for name, members in groups.items() if members}


def waiting_lanes(workers: int, cores: int, end_to_end: int = 0) -> int:
    """How many groups the waiting tests get: every worker but one per core, which keep the
    cores busy with the computing tests (a waiting test needs a worker, not a core), and never
    more than the workers the `end_to_end` groups leave, so no worker holds two groups one after
    the other; none when there is no worker beyond one per core, and the waiting tests share the
    queue."""
    return max(0, min(workers - cores, workers - end_to_end, workers - 1))


# The modules that run the project's own commands end to end, in three groups of about equal wall
# time (measured alone on 2 cores: about 65, 62 and 60 s), each on a worker of its own.
END_TO_END = {"tests/engine/test_outside_the_checkout.py": "end-to-end-install",
              "tests/ci/test_pull_request.py": "end-to-end-workflow",
              "tests/engine/test_add_a_profile.py": "end-to-end-workflow",
              "tests/site/test_browser.py": "end-to-end-browser"}


@pytest.hookimpl(tryfirst=True)     # before xdist reads the groups off the markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items[:] = slow_modules_first(items)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2:
        return
    for item in items:
        if _module(item) in END_TO_END:
            item.add_marker(pytest.mark.xdist_group(END_TO_END[_module(item)]))
    rest = [item for item in items if _module(item) not in END_TO_END]
    for name, members in waiting_groups(rest, waiting_lanes(workers, os.cpu_count() or 1,
                                                             len(set(END_TO_END.values())))).items():
        for item in members:
            item.add_marker(pytest.mark.xdist_group(name))



@pytest.fixture(scope="session")
def shared_checkout(tmp_path_factory):
    """The working tree copied once per run into a git repository, for the tests that run the
    project's own commands in a tree of their own: each clones it (tests/checkout.py)."""
    try:
        return once_per_run(tmp_path_factory, "checkout", lambda folder: make_shared_checkout(folder / "repo")) / "repo"
    except NotSetUp as err:
        pytest.skip(str(err))


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session) -> None:
    """What collection left (modules, test items, the libraries they import: over 100,000 objects)
    lives until the end; frozen, the garbage collector stops walking it on every full collection,
    the one the conformance tests make after each test among them (a tenth of a CPU-second each)."""
    gc.collect()
    gc.freeze()


# OE_TEST_CPU=<directory>: each process running tests appends one line per test to a file of its
# own there (`<worker>.tsv`): node id, `test`, CPU seconds of the process and of the subprocesses
# it reaped during the test (its fixtures' set-up and teardown included), and wall seconds; at the
# end its totals. Processes never reaped (a browser's helpers) are not seen. Where a suite's CPU goes, for `make test`'s budget. A suite a test runs (in a copied
# checkout) is counted in that test's subprocesses, not recorded again.
_CPU_DIR = os.environ.get("OE_TEST_CPU")
if _CPU_DIR and os.environ.get("PYTEST_XDIST_WORKER"):
    del os.environ["OE_TEST_CPU"]

if _CPU_DIR:
    import resource
    import time

    os.makedirs(_CPU_DIR, exist_ok=True)

    def _cpu() -> tuple[float, float]:
        own = resource.getrusage(resource.RUSAGE_SELF)
        reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime, reaped.ru_utime + reaped.ru_stime

    def _record(line: str) -> None:
        name = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.path.join(_CPU_DIR, f"{name}.tsv"), "a") as out:
            out.write(line + "\n")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        before, start = _cpu(), time.monotonic()
        yield
        after, wall = _cpu(), time.monotonic() - start
        _record(f"{item.nodeid}\ttest\t{after[0] - before[0]:.3f}\t{after[1] - before[1]:.3f}\t{wall:.3f}")

    def pytest_configure(config):
        if not getattr(config.option, "numprocesses", None):
            os.environ.pop("OE_TEST_CPU", None)   # one process: the tests' subprocesses inherit no more

    def pytest_sessionfinish(session):
        own, reaped = _cpu()
        _record(f"-\tprocess-total\t{own:.3f}\t{reaped:.3f}")
