"""The load stage: located nodes, duplicate keys, and unusable input as `SourceError`."""

from __future__ import annotations

import pytest

from openengine.contractkit.locations import Loc
from oespec.registry import SourceError, load_registry_text, parse_text, read_file
from openengine.contractkit.yamlsource import YMap, YScalar, YSeq


def test_locations_are_one_based():
    root = parse_text("a: 1\nlist:\n  - x\n  - {k: v}\n").root
    assert isinstance(root, YMap)
    assert root.key_loc("a") == Loc(1, 1) and root.value_loc("a") == Loc(1, 4)
    items = root.get("list")
    assert isinstance(items, YSeq) and items.items[0].loc == Loc(3, 5)
    assert items.items[1].key_loc("k") == Loc(4, 6)


def test_duplicate_keys_keep_the_first_and_are_recorded():
    source = parse_text("a: 1\nb: {c: 1, c: 2}\na: 3\n")
    assert source.root.plain() == {"a": 1, "b": {"c": 1}}
    assert sorted(source.walk_duplicates()) == [("a", Loc(3, 1), Loc(1, 1)), ("c", Loc(2, 11), Loc(2, 5))]


def test_scalars_resolve_as_yaml_1_2_and_keep_their_text():
    root = parse_text("v: 1.10\nyes_word: yes\nhex: 0x10\ninf: -.inf\nnull_value: ~\nflag: true\n").root
    assert root.get("v").raw == "1.10" and root.get("v").value == 1.1
    assert root.get("yes_word").value == "yes"
    assert root.get("hex").value == 16
    assert root.get("inf").value == float("-inf")
    assert root.get("null_value").value is None and root.get("flag").value is True


def test_unquoted_versions_are_read_from_their_text():
    text = (open(__file__.replace("test_source.py", "../data/registry/valid/minimal/profiles.yaml")).read()
            .replace('version: "1.1"\n    scope', "version: 1.10\n    scope")
            .replace('      - version: "1.1"', "      - version: 1.10")
            .replace('        since: "1.1"', "        since: 1.10"))
    resolved = load_registry_text(text)
    assert resolved.diagnostics == []
    assert str(resolved.registry.profile("openengine.load").version) == "1.10"


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("# only a comment\n", "empty"),
    ("a: 1\n---\nb: 2\n", "more than one YAML document"),
    ("base: &b {x: 1}\nother:\n  <<: *b\n", "merge keys"),
    ("? [a, b]\n: c\n", "plain scalars"),
    ("a: [" * 80 + "]" * 80 + "\n", "nesting deeper"),
    ("a: &a [*a]\n", "nesting deeper"),
    ("key: 'unterminated\n", "YAML syntax error"),
    ("a:\n\t- tab\n", "YAML syntax error"),
    ("x: *nothing\n", "YAML"),
])
def test_unusable_text_raises_source_error(text, message):
    with pytest.raises(SourceError) as exc:
        parse_text(text, "r.yaml")
    assert message in exc.value.message
    assert exc.value.path == "r.yaml" and exc.value.loc.line >= 1


@pytest.mark.slow
def test_alias_expansion_is_capped():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 7):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    with pytest.raises(SourceError) as exc:
        parse_text("\n".join(lines) + "\n")
    assert "expands to more than" in exc.value.message


def test_syntax_errors_point_at_the_problem():
    with pytest.raises(SourceError) as exc:
        parse_text("registry:\n  revision: 1\n  package: [a\nprofiles: []\n")
    assert exc.value.loc.line == 4


def test_read_file_errors(tmp_path):
    with pytest.raises(SourceError) as exc:
        read_file(tmp_path / "missing.yaml", "shown.yaml")
    assert exc.value.path == "shown.yaml" and exc.value.loc == Loc()
    with pytest.raises(SourceError) as exc:
        read_file(tmp_path)
    assert "directory" in exc.value.message
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"a: 1\nb: \xc3\x28\n")
    with pytest.raises(SourceError) as exc:
        read_file(bad)
    assert exc.value.loc == Loc(2, 4)


def test_scalar_nodes_are_plain():
    node = parse_text("just a string\n").root
    assert isinstance(node, YScalar) and node.plain() == "just a string"


# Lexical errors are located where they are, not where the parser gives up.
_REGISTRY_HEAD = "registry:\n  revision: 1\n  package: openengine.v1\nprofiles:\n  - name: openengine.core\n"


@pytest.mark.parametrize("tail, loc, message", [
    ("    summary: A\x00B\n", Loc(6, 15), "NUL"),
    ("    summary: A\x07B\n", Loc(6, 15), "U+0007"),
    ("    summary: ok\n    description: A\x1bB\n", Loc(7, 19), "U+001B"),
    ('    summary: "never closed\n    description: x\n    version: "1.0"\n', Loc(6, 14), "not closed"),
    ("    summary: x\n    limits: " + "[" * 100 + "\n", Loc(7, 77), "nesting deeper"),
    ("    summary: x\n    limits: " + "[" * 5000 + "\n", Loc(7, 77), "nesting deeper"),
])
def test_lexical_errors_are_located_where_they_occur(tail, loc, message):
    with pytest.raises(SourceError) as exc:
        parse_text(_REGISTRY_HEAD + tail, "r.yaml")
    assert (exc.value.loc.line, exc.value.loc.column) == (loc.line, loc.column)
    assert message in exc.value.message and exc.value.hint


def test_tabs_brackets_and_quotes_in_text_stay_legal():
    text = _REGISTRY_HEAD + "    summary: \"a [b] {c} and 'd'\"\n    description: uses [0, 1]  # comment [[[\n"
    assert parse_text(text).root.get("profiles").items[0].get("summary").value == "a [b] {c} and 'd'"


def test_a_legal_multi_line_quote_is_not_blamed_for_a_later_error():
    text = _REGISTRY_HEAD + '    summary: "spans\n      two lines"\n    description: x\n  bad: [\n'
    with pytest.raises(SourceError) as exc:
        parse_text(text, "r.yaml")
    assert exc.value.loc.line > 7 and "not closed on its line" not in exc.value.message
