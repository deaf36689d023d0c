"""Fixtures for the site tests: build a site (the real one, or one from other inputs) with mkdocs."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from oespec.generate import write_outputs
from oespec.generate_with_catalogues import plan
from oespec.registry import load_registry

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "site"
SCREENSHOTS = ROOT / "build" / "screenshots"


class BuildFailed(AssertionError):
    pass


def mkdocs_build(config_file: Path, site_dir: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` as `make site` runs it; raises BuildFailed with mkdocs' output."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config_file),
                           "-d", str(site_dir)], cwd=config_file.parent, capture_output=True, text=True,
                          env=env, timeout=120)
    if proc.returncode != 0:
        raise BuildFailed(f"mkdocs build failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def site_from(root: Path, registry_file: Path, spec_pages: dict[str, str], *,
              nav_spec: list | None = None) -> Path:
    """A site of its own under `root`: the registry, the given spec pages, the docs generator's
    pages, and the repository's mkdocs.yml with its docs dir and spec navigation pointed there.
    Returns the mkdocs config file to build."""
    (root / "spec").mkdir(parents=True)
    for name, text in spec_pages.items():
        (root / "spec" / name).write_text(text, encoding="utf-8")
    shutil.copy(registry_file, root / "profiles.yaml")
    resolved = load_registry(root / "profiles.yaml")
    assert resolved.registry is not None, resolved.diagnostics
    write_outputs(root, plan(resolved.registry, root, only=["docs"]))

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    config["docs_dir"] = str(root / "spec")
    config["site_dir"] = str(root / "build")
    config["hooks"] = [str(ROOT / "site" / "hooks.py")]
    config["theme"]["custom_dir"] = str(ROOT / "site" / "overrides")
    config.pop("watch", None)
    nav = []
    for entry in config["nav"]:
        title = next(iter(entry)) if isinstance(entry, dict) else None
        if title == "Home":
            nav.append({"Home": "index.md"})
        elif title == "Specification":
            nav.append({"Specification": nav_spec or [p for p in spec_pages if p != "index.md"]})
        else:
            nav.append(entry)
    config["nav"] = [e for e in nav if not (isinstance(e, dict) and e.get("Specification") == [])]
    config_file = root / "mkdocs.yml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return config_file


def built_once(tmp_path_factory, name: str, build) -> Path:
    """`build(folder)` run once per test run, even though pytest-xdist gives every worker a session
    of its own: the first worker to ask builds under a lock, the others wait for it and reuse its
    folder, so tests on several workers share one build."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent   # the run's folder, above each worker's own
    folder, done = base / f"shared-{name}", base / f"shared-{name}.done"
    with open(base / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)   # what a failed attempt left
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> Path:
    """The repository's own site, built strictly once per test run."""
    shared = built_once(tmp_path_factory, "site", lambda folder: mkdocs_build(ROOT / "mkdocs.yml", folder / "build"))
    return shared / "build"


@pytest.fixture(scope="session")
def registry():
    resolved = load_registry(ROOT / "profiles.yaml")
    assert resolved.registry is not None
    return resolved.registry


def _fifteen_profiles(path) -> None:
    """The repository's registry plus extra profiles up to fifteen, chained three deep, one of
    them experimental and one deprecated, with long names."""
    text = (ROOT / "profiles.yaml").read_text(encoding="utf-8").rstrip("\n") + "\n"
    count = text.count("\n  - name: ")
    extra = []
    for i in range(15 - count):
        requires = "openengine.load" if i % 3 == 0 else ("example.long-profile-name-0" if i % 3 == 1 else "openengine.core")
        extra.append(f"""  - name: example.long-profile-name-{i}
    version: "{'0.2' if i == 1 else '1.0'}"
    scope: engine
    summary: Extra profile {i}.
    description: An extra profile that makes the catalogue fifteen long.
{'    deprecated: Use openengine.load.' + chr(10) if i == 2 else ''}    history:
      - version: "{'0.2' if i == 1 else '1.0'}"
        changes: First version.
    requires:
      - profile: {requires}
        version: ">= 0.1"
""")
    path.write_text(text + "".join(extra), encoding="utf-8")


def _spec_nav() -> list:
    """The Specification section of the repository's navigation."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return next(entry["Specification"] for entry in config["nav"]
                if isinstance(entry, dict) and "Specification" in entry)


@pytest.fixture(scope="session")
def fifteen_site(tmp_path_factory):
    """The whole site (spec, protos, JSON Schemas) for a catalogue of fifteen profiles, built once."""
    return built_once(tmp_path_factory, "fifteen", _build_fifteen) / "build"


def _build_fifteen(root: Path) -> None:
    _fifteen_profiles(root / "registry.yaml")
    shutil.copytree(ROOT / "proto", root / "proto")
    shutil.copytree(ROOT / "schemas", root / "schemas")
    (root / "oespec" / "registry").mkdir(parents=True)
    shutil.copy(ROOT / "oespec" / "registry" / "profiles.schema.json", root / "oespec" / "registry")
    spec = {p.name: p.read_text(encoding="utf-8") for p in sorted((ROOT / "spec").glob("*.md"))}
    config = site_from(root, root / "registry.yaml", spec, nav_spec=_spec_nav())
    mkdocs_build(config, root / "build")
