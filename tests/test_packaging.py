"""The distribution's declarations: dependency ranges in step with the pinned development set,
the one-line answer of a command whose library is not installed, and the README's command list.
Building and installing the distribution is tests/engine/test_outside_the_checkout.py."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from oespec.cli import COMMANDS, TOOLKIT_INSTALL, run

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def pinned() -> dict[str, Version]:
    """requirements.txt and requirements-llama.txt: distribution -> the exact version the
    development venv installs."""
    pins = {}
    lines = [line for name in ("requirements.txt", "requirements-llama.txt")
             for line in (ROOT / name).read_text(encoding="utf-8").splitlines()]
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"requirements.txt: {line!r} is not pinned exactly"
            pins[canonicalize_name(name)] = Version(version)
    return pins


DECLARED = [*PYPROJECT["project"]["dependencies"],
            *(r for extra in PYPROJECT["project"]["optional-dependencies"].values() for r in extra)]


@pytest.mark.parametrize("text", DECLARED)
def test_each_dependency_range_starts_at_the_pinned_version(text):
    """The tests run the pinned versions, so the range a user gets starts there; it ends before
    the next major release (the next minor one below 1.0)."""
    requirement = Requirement(text)
    pin = pinned().get(canonicalize_name(requirement.name))
    assert pin is not None, f"{requirement.name} is declared in pyproject.toml but not pinned in requirements.txt"
    bounds = {spec.operator: Version(spec.version) for spec in requirement.specifier}
    assert bounds.get(">=") == pin, f"{text}: the lower bound is not requirements.txt's {pin}"
    upper = Version(f"{pin.major + 1}") if pin.major else Version(f"0.{pin.minor + 1}")
    assert bounds.get("<") == upper, f"{text}: the upper bound should be <{upper}"


def test_the_build_requirements_are_the_pinned_protoc():
    """grpcio-tools compiles the wheel's bindings: exactly the version the checkout generates with."""
    pins = pinned()
    for text in PYPROJECT["build-system"]["requires"]:
        requirement = Requirement(text)
        if canonicalize_name(requirement.name) == "grpcio-tools":
            assert str(requirement.specifier) == f"=={pins['grpcio-tools']}"
            break
    else:
        pytest.fail("pyproject.toml's build-system does not require grpcio-tools")


def test_the_runtime_needs_none_of_the_toolkit_libraries():
    runtime = {canonicalize_name(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"]}
    assert runtime == {"grpcio", "grpcio-health-checking", "grpcio-reflection", "grpcio-status",
                       "googleapis-common-protos", "protobuf", "ruamel-yaml"}


def test_the_readme_lists_exactly_the_runtime_dependencies():
    """The README's sentence on the runtime install names every runtime dependency, and no other."""
    readme = (ROOT / "README.md").read_text()
    sentence = readme[readme.index("**The runtime install** depends on"):readme.index("and nothing else")]
    named = {canonicalize_name(word) for word in re.findall(r"[A-Za-z][\w.-]*[\w]", sentence)}
    runtime = {canonicalize_name(Requirement(r).name) for r in PYPROJECT["project"]["dependencies"]}
    assert runtime <= named, f"the README does not name {sorted(runtime - named)}"
    known = {canonicalize_name(name) for name in pinned()}
    assert not (named & known) - runtime, f"the README names {sorted((named & known) - runtime)} as runtime"


def test_a_command_whose_library_is_missing_says_to_install_the_toolkit(tmp_path, monkeypatch, capsys):
    """As in the runtime install, where jsonschema is absent: one line and exit status 2."""
    monkeypatch.setenv("OESPEC_NO_CACHE", "1")
    monkeypatch.setitem(sys.modules, "jsonschema", None)   # `import jsonschema` now fails
    assert run(["check", str(ROOT / "profiles.yaml"), "--no-head"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == f"oespec check: needs the module jsonschema, which is not installed; " \
                      f"the toolkit extra brings it: {TOOLKIT_INSTALL}\n"


def test_a_command_module_that_cannot_import_is_still_listed_and_answers_in_one_line(tmp_path, monkeypatch,
                                                                                      capsys):
    (tmp_path / "needs_a_library.py").write_text("import a_library_that_is_not_installed\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(COMMANDS, "check", "needs_a_library")
    with pytest.raises(SystemExit):
        run(["--help"])
    assert re.search(r"check +oespec check: needs the module a_library_that_is_not_installed",
                     capsys.readouterr().out)
    assert run(["check", "profiles.yaml", "--format", "json"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"oespec check: needs the module a_library_that_is_not_installed, which is not installed; "
        f"the toolkit extra brings it: {TOOLKIT_INSTALL}"]


def test_a_missing_project_module_is_not_blamed_on_the_toolkit(tmp_path, monkeypatch):
    (tmp_path / "broken_command.py").write_text("import oespec.no_such_module\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(COMMANDS, "check", "broken_command")
    with pytest.raises(ModuleNotFoundError, match="oespec.no_such_module"):
        run(["check"])


def test_missing_bindings_are_named_with_the_command_that_builds_them(tmp_path, monkeypatch, capsys):
    (tmp_path / "needs_bindings.py").write_text("import openengine.v1.not_built_pb2\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(COMMANDS, "engine", "needs_bindings")
    assert run(["engine"]) == 2
    assert capsys.readouterr().err == ("oespec engine: the contract's Python bindings (openengine.v1.not_built_pb2) "
                                       "are missing; in a checkout, run `make bindings`\n")


def test_the_readme_lists_every_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^oespec ([a-z]+)\b", readme, re.M))
    assert listed >= set(COMMANDS), f"the README's command list lacks {sorted(set(COMMANDS) - listed)}"
