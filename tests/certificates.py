"""Certificates for the TLS tests: a CA, and a server and a client certificate it signs, made with
the openssl command. The keys are P-256 (ECDSA): gRPC takes them as it takes RSA keys, and making
one costs a millisecond where an RSA key costs a tenth of a second or more."""

from __future__ import annotations

import subprocess
from pathlib import Path

KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
FILES = ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")


def _openssl(folder: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)


def make_certificates(folder: Path, server_names: str = "DNS:localhost,IP:127.0.0.1") -> dict[str, str]:
    """The CA, the server certificate for `server_names` (an openssl subjectAltName list) and the
    client certificate (for client authentication), written to `folder`; their paths by file name."""
    _openssl(folder, "req", "-x509", *KEY, "-days", "1", "-subj", "/CN=test-ca",
             "-keyout", "ca.key", "-out", "ca.pem")
    (folder / "server.cnf").write_text(f"subjectAltName={server_names}\n")
    (folder / "client.cnf").write_text("extendedKeyUsage=clientAuth\n")
    for name in ("server", "client"):
        _openssl(folder, "req", *KEY, "-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr")
        _openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                 "-CAcreateserial", "-days", "1", "-out", f"{name}.pem", "-extfile", f"{name}.cnf")
    return {name: str(folder / name) for name in FILES}
