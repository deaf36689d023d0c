"""A target behind TLS: `--tls`, `--ca`, `--cert`/`--key` and `--server-name` reach it, and a
mismatch (TLS server checked without TLS, plaintext server with it, an untrusted or misnamed
certificate, a missing client certificate) gets one line naming the option that fixes it."""

from __future__ import annotations

from pathlib import Path

import pytest

from oespec.cli import run
from tests.certificates import make_certificates
from tests.conformance.conftest import failed, run_suite
from tests.conformance.otherengine import OtherEngine

FAST = ["--rpc-timeout", "2", "--case-timeout", "4", "--case", "core.discovery.answers"]


@pytest.fixture(scope="module")
def pem(tmp_path_factory) -> dict[str, str]:
    return make_certificates(tmp_path_factory.mktemp("tls"))


def _tls_engine(pem: dict[str, str], *, client_ca: bool = False, **kw) -> OtherEngine:
    read = lambda name: Path(pem[name]).read_bytes()   # noqa: E731
    return OtherEngine(tls=(read("server.key"), read("server.pem")),
                       client_ca=read("ca.pem") if client_ca else None, **kw)


def _conformance(capsys, *args):
    code = run(["conformance", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_tls_server_checked_without_tls_gets_one_line_saying_so(capsys, pem):
    with _tls_engine(pem) as engine:
        code, out, err = _conformance(capsys, "--target", engine.address, *FAST)
    assert code == 2 and out == ""
    assert f"{engine.address} speaks TLS: check it with --tls" in err
    assert len(err.strip().splitlines()) == 1


def test_a_plaintext_server_checked_with_tls_is_told_to_drop_it(capsys):
    with OtherEngine() as engine:
        code, out, err = _conformance(capsys, "--target", engine.address, "--tls", *FAST)
    assert code == 2 and "does not speak TLS" in err and "drop --tls" in err


@pytest.mark.parametrize("args, says", [
    ([], "not signed by a CA the runner trusts: give the CA that signed it with --ca PEM"),
    (["--server-name", "elsewhere.test"], "does not name the host of --target: give the name the "
                                          "certificate carries with --server-name NAME"),
])
def test_a_certificate_the_runner_cannot_accept_names_the_option(capsys, pem, args, says):
    ca = ["--ca", pem["ca.pem"]] if args else []
    with _tls_engine(pem) as engine:
        code, out, err = _conformance(capsys, "--target", engine.address, "--tls", *ca, *args, *FAST)
    assert code == 2 and says in err, err


def test_a_server_that_wants_a_client_certificate_says_so(capsys, pem):
    with _tls_engine(pem, client_ca=True) as engine:
        code, out, err = _conformance(capsys, "--target", engine.address, "--ca", pem["ca.pem"], *FAST)
    assert code in (1, 2)
    assert "--cert" in (err + out), (out, err)


def test_the_client_certificate_options_go_together(capsys, pem):
    code, _, err = _conformance(capsys, "--target", "127.0.0.1:1", "--cert", pem["client.pem"])
    assert code == 2 and "--cert and --key go together" in err


def test_tls_options_reach_the_engine_through_the_command(capsys, pem):
    with _tls_engine(pem) as engine:
        code, out, err = _conformance(capsys, "--target", engine.address, "--tls", "--ca",
                                      pem["ca.pem"], *FAST)
    assert code == 0 and "CONFORMS" in out, (out, err)


@pytest.mark.slow
@pytest.mark.waits
@pytest.mark.timeout(180)
def test_an_engine_behind_mutual_tls_under_another_name_conforms(tmp_path):
    """The whole suite over TLS, with a client certificate and a certificate that names only
    another host: every stream and channel of every case goes through the same TLS options."""
    pem = make_certificates(tmp_path, "DNS:engine.test")
    with _tls_engine(pem, client_ca=True) as engine:
        report = run_suite(engine.address, admin_token=None, tls=True, ca=pem["ca.pem"],
                           cert=pem["client.pem"], key=pem["client.key"], server_name="engine.test")
    assert failed(report) == {}, report.verdict
    assert report.verdict.startswith("CONFORMS")
