"""The short form of the soak (bench/soak.py): a few cases against the reference engine and the
counting example with a CPU burner beside them, no false failure and no traceback."""

from __future__ import annotations

import pytest

from bench import soak

pytestmark = pytest.mark.waits


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_short_soak_under_load_has_no_false_failure(capsys):
    code = soak.main(["--runs", "1", "--burners", "1", "--no-record",
                      "--case", "core.abort.queued", "--case", "load.watch.periodic"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "| reference | 1 |" in out and "| counting-example | 1 |" in out
