"""The located loader's libyaml fast path gives exactly the tree the full parser gives, and leaves
every document it cannot vouch for to the full parser."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from openengine.contractkit import yamlsource
from openengine.contractkit.yamlfast import resolve_plain

REPO = Path(__file__).resolve().parents[2]


def _full(text: str):
    """The full parser's tree, or the exception it raises."""
    try:
        nodes = [n for n in yamlsource._compose(text) if n is not None]
        if len(nodes) != 1:
            return ValueError("not one document")
        return yamlsource._convert(nodes[0], 0, "doc", yamlsource._Budget(yamlsource.MAX_NODES))
    except Exception as err:   # noqa: BLE001 - any refusal counts as one
        return err


def _repository_yaml() -> list[Path]:
    """Every YAML file of the repository but the breaking fixtures (registry variants the registry
    fixtures already cover) and build outputs."""
    skip = {".venv", "node_modules", "build", "breaking"}
    return sorted(p for pattern in ("*.yaml", "*.yml") for p in REPO.rglob(pattern) if not skip & set(p.parts))


def test_the_registry_takes_the_fast_path_and_gets_the_full_parsers_tree():
    text = (REPO / "profiles.yaml").read_text(encoding="utf-8")
    fast = yamlsource._compose_fast(text)
    assert fast is not None
    assert fast == _full(text)


@pytest.mark.parametrize("path", _repository_yaml(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_yaml_file_of_the_repository_reads_the_same(path: Path):
    text = path.read_text(encoding="utf-8", errors="replace")
    fast = yamlsource._compose_fast(text)
    if fast is not None:
        assert fast == _full(text)


@pytest.mark.parametrize("text", [
    "a: &x 1\nb: *x\n",              # anchors and aliases
    "a: !!str 1\n",                  # explicit tags
    "%YAML 1.2\n---\na: 1\n",        # directives
    "a:\nb: 1\n",                    # an empty value (the parsers place it differently)
    "a: |#note\n  x\n",              # a comment glued to a block header
    "a: [1, 2\n",                    # a syntax error: the full parser reports it
    "a: 1\n---\nb: 2\n",             # two documents
    "a:\tb\n",                       # tabs
    "a: 1\r\nb: 2\r\n",              # CR line breaks
    "<<: {a: 1}\n",                  # merge keys
    "? [a]\n: 1\n",                  # a key that is not a scalar
    "",                              # nothing
])
def test_documents_the_fast_path_leaves_to_the_full_parser(text: str):
    assert yamlsource._compose_fast(text) is None


@pytest.mark.parametrize("value, tag", [
    ("true", "bool"), ("yes", "str"), ("on", "str"), ("1", "int"), ("012", "int"), ("0o17", "int"),
    ("0x1F", "int"), ("1_000", "int"), ("1.0", "float"), ("1.", "float"), ("1e3", "float"),
    (".inf", "float"), ("-.Inf", "float"), (".NaN", "float"), ("~", "null"), ("null", "null"),
    ("2024-01-01", "timestamp"), ("1.10", "float"), ("v1", "str"), ("<<", "merge"), ("=", "value"),
])
def test_plain_scalars_resolve_as_yaml_1_2(value: str, tag: str):
    assert resolve_plain(value) == f"tag:yaml.org,2002:{tag}"
    full = yamlsource._compose(f"k: {value}\n")[0].value[0][1]
    assert full.tag == resolve_plain(value)


FRAGMENTS = ["a", "b c", "1", "1.0", "-2", "0x1f", "true", "no", "null", "~", "'q'", '"d\\n"', "é", "≤ 3",
             "2024-01-01", ".inf", "x: y", "[1, 2]", "{a: 1}", "#c", "- z", "''", "|", "|-", ">+", "|2",
             "- |\n  t", "k: >\n   u\n  v", "x:y", "a #b", "[a, {b: c}]", "{a, b}", "a,b", "?", "a:",
             "\n", " ", "  ", ":", ",", "[", "]", "{", "}", "? ", "&a ", "*a", "!!str ", "%", "@", "`", '"', "'"]


def _document(rng: random.Random) -> str:
    lines = []
    for _ in range(rng.randint(1, 6)):
        indent = " " * rng.choice([0, 0, 2, 4])
        body = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 3)))
        kind = rng.random()
        lines.append(f"{indent}{rng.choice('kmn')}: {body}" if kind < 0.5 else
                     f"{indent}- {body}" if kind < 0.8 else indent + body)
    return "\n".join(lines) + rng.choice(["", "\n"])


def test_random_documents_the_fast_path_takes_read_the_same():
    rng = random.Random(20261203)
    taken = 0
    for _ in range(3000):
        text = _document(rng)
        fast = yamlsource._compose_fast(text)
        if fast is None:
            continue
        taken += 1
        assert fast == _full(text), text
    assert taken > 100   # the corpus exercises the fast path, not only the fallback
