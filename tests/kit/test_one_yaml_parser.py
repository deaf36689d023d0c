"""Every YAML file the toolkit and the runtime read goes through one parser: the located loader's
ruamel.yaml composer (`openengine.contractkit.yamlsource`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
YAML_PARSERS = re.compile(r"^\s*(import yaml\b|from yaml\b|import ruamel|from ruamel)", re.M)


def test_only_the_located_loader_imports_a_yaml_parser():
    importers = sorted(p.relative_to(ROOT).as_posix() for folder in ("oespec", "openengine")
                       for p in (ROOT / folder).rglob("*.py") if YAML_PARSERS.search(p.read_text(encoding="utf-8")))
    assert importers == ["openengine/contractkit/yamlsource.py"]
