"""The suite's collection order (tests/conftest.py): modules with slow tests first, each module's
tests kept together and in their own order."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("suite_conftest", Path(__file__).with_name("conftest.py"))
suite_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(suite_conftest)


class FakeItem:
    def __init__(self, nodeid: str, slow: bool = False):
        self.nodeid = nodeid
        self.slow = slow

    def get_closest_marker(self, name: str):
        return object() if name == "slow" and self.slow else None


def test_modules_with_slow_tests_move_first_and_stay_whole():
    items = [FakeItem("tests/a.py::one"), FakeItem("tests/a.py::two"),
             FakeItem("tests/b.py::fast"), FakeItem("tests/b.py::slow", slow=True),
             FakeItem("tests/c.py::only"),
             FakeItem("tests/d.py::slow", slow=True), FakeItem("tests/d.py::fast")]
    suite_conftest.pytest_collection_modifyitems(items)
    assert [i.nodeid for i in items] == [
        "tests/b.py::fast", "tests/b.py::slow", "tests/d.py::slow", "tests/d.py::fast",
        "tests/a.py::one", "tests/a.py::two", "tests/c.py::only"]


def test_without_slow_tests_the_order_is_unchanged():
    items = [FakeItem(f"tests/m{n}.py::t") for n in range(5)]
    before = [i.nodeid for i in items]
    suite_conftest.pytest_collection_modifyitems(items)
    assert [i.nodeid for i in items] == before
