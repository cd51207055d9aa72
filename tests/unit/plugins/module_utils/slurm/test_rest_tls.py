"""The REST transport's HTTP function against a real TLS server on loopback (a certificate made
here with openssl, one of the Debian packages `make debs` installs): an unknown CA is refused
before anything is sent, the CA bundle given is trusted, verification off accepts it, and a
redirect is not followed (the token would go with it)."""

from __future__ import annotations

import http.server
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.rest import (
    SlurmRestClient,
    SlurmRestError,
    TokenSource,
    stdlib_http,
)


class Handler(http.server.BaseHTTPRequestHandler):
    seen: List[Tuple[str, str]] = []

    def do_GET(self) -> None:
        Handler.seen.append((self.path, self.headers.get("X-SLURM-USER-TOKEN", "")))
        if self.path.startswith("/moved"):
            self.send_response(302)
            self.send_header("Location", "https://127.0.0.1:1/elsewhere")
            self.end_headers()
            return
        body = b'{"pings": [], "meta": {"slurm": {"release": "26.05.5"}}, "errors": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Tuple[str, Path]]:
    """https://127.0.0.1:<port> with a self-signed certificate for 127.0.0.1; (its URL, the CA file)."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "cert.pem", where / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=slurmrestd",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield "https://127.0.0.1:%d" % httpd.server_address[1], cert
    httpd.shutdown()
    httpd.server_close()


def rest(url: str, tmp_path: Path, **http_options) -> SlurmRestClient:
    key = tmp_path / "jwt.key"
    key.write_bytes(b"k" * 32)
    return SlurmRestClient(url, TokenSource("root", jwt_key_file=str(key)), http=stdlib_http(**http_options),
                           timeout=10)


def test_an_unknown_ca_is_refused_and_the_given_one_trusted(server, tmp_path):
    url, ca = server
    Handler.seen.clear()
    with pytest.raises(SlurmRestError, match=r"cannot reach slurmrestd: .*CERTIFICATE_VERIFY_FAILED"):
        rest(url, tmp_path).ping()
    assert Handler.seen == []  # the token never left
    assert str(rest(url, tmp_path, ca_file=str(ca)).version()) == "26.05.5"
    assert str(rest(url, tmp_path, verify=False).version()) == "26.05.5"


def test_a_redirect_is_not_followed(server, tmp_path):
    url, ca = server
    Handler.seen.clear()
    http = stdlib_http(ca_file=str(ca))
    status, _text = http("GET", url + "/moved", None, {"X-SLURM-USER-TOKEN": "t"}, 10)
    assert status == 302 and [path for path, _token in Handler.seen] == ["/moved"]
