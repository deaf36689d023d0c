"""The fixture diffs apply exactly or not at all, and name the hunk that does not fit."""

from __future__ import annotations

import pytest

from tests.fixture_cases import DiffError, apply_diff

BASE = {"profiles.yaml": "registry:\n  revision: 3\n  package: openengine.v1\n"}


def test_a_diff_edits_creates_and_deletes_files():
    diff = ("--- a/profiles.yaml\n+++ b/profiles.yaml\n@@ -2 +2 @@\n-  revision: 3\n+  revision: 4\n"
            "--- /dev/null\n+++ b/proto/a.proto\n@@ -0,0 +1,2 @@\n+syntax = \"proto3\";\n+package a;\n")
    tree = apply_diff(BASE, diff, "case.diff")
    assert tree == {"profiles.yaml": "registry:\n  revision: 4\n  package: openengine.v1\n",
                    "proto/a.proto": "syntax = \"proto3\";\npackage a;\n"}
    removal = "--- a/proto/a.proto\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-syntax = \"proto3\";\n-package a;\n"
    assert apply_diff(tree, removal, "case.diff") == {"profiles.yaml": tree["profiles.yaml"]}


def test_a_hunk_that_does_not_match_its_base_is_refused():
    diff = "--- a/profiles.yaml\n+++ b/profiles.yaml\n@@ -2 +2 @@\n-  revision: 2\n+  revision: 4\n"
    with pytest.raises(DiffError, match=r"case.diff:4: profiles.yaml line 2 is '  revision: 3'"):
        apply_diff(BASE, diff, "case.diff")


def test_a_short_hunk_is_refused():
    diff = "--- a/profiles.yaml\n+++ b/profiles.yaml\n@@ -2,2 +2,2 @@\n-  revision: 3\n+  revision: 4\n"
    with pytest.raises(DiffError, match="ends early"):
        apply_diff(BASE, diff, "case.diff")
