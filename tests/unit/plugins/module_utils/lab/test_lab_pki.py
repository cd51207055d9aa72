# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""lab_pki_info's assessment: current certificates need nothing; a missing or loose key, another CA,
other SANs, a near expiry each mark exactly the certificates they concern; bad input names the field.
lab_pki's issuing: what it makes assesses current, serves TLS, and a rerun writes nothing."""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.lab.pki import PkiError, answer, assess, issue, parse

NOW = datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc)


def write_key(path: Path):
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    os.chmod(path, 0o600)
    return key


def write_cert(path: Path, key, common_name: str, issuer_key=None, issuer_name=None, san=(), ca=False,
               days: int = 3650, usage=ExtendedKeyUsageOID.SERVER_AUTH):
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer_name or subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(NOW - datetime.timedelta(days=1)).not_valid_after(NOW + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=ca))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                                        critical=True)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        builder = builder.add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False),
                                        critical=False)
    if san:
        names = [x509.IPAddress(ipaddress.ip_address(value[3:])) if value.startswith("IP:") else x509.DNSName(value[4:])
                 for value in san]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(issuer_key or key, hashes.SHA256())
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    os.chmod(path, 0o644)
    return cert


def wanted(tmp_path: Path):
    return [
        {"name": "ca", "key": str(tmp_path / "ca.key"), "cert": str(tmp_path / "ca.crt"), "common_name": "lab-ca",
         "ca": True, "key_usage": ["keyCertSign", "cRLSign", "digitalSignature"]},
        {"name": "apiserver", "key": str(tmp_path / "apiserver.key"), "cert": str(tmp_path / "apiserver.crt"),
         "common_name": "kube-apiserver", "san": ["IP:127.0.0.1", "DNS:localhost"], "extended_usage": ["serverAuth"],
         "key_usage": ["digitalSignature", "keyEncipherment"], "issuer": "ca"},
        {"name": "admin", "key": str(tmp_path / "admin.key"), "cert": str(tmp_path / "admin.crt"),
         "common_name": "admin", "extended_usage": ["clientAuth"], "issuer": "ca"},
    ]


@pytest.fixture()
def lab(tmp_path):
    ca_key = write_key(tmp_path / "ca.key")
    ca = write_cert(tmp_path / "ca.crt", ca_key, "lab-ca", ca=True)
    api_key = write_key(tmp_path / "apiserver.key")
    write_cert(tmp_path / "apiserver.crt", api_key, "kube-apiserver", ca_key, ca.subject,
               san=("IP:127.0.0.1", "DNS:localhost"))
    admin_key = write_key(tmp_path / "admin.key")
    write_cert(tmp_path / "admin.crt", admin_key, "admin", ca_key, ca.subject, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    return {"path": tmp_path, "ca_key": ca_key, "ca": ca, "api_key": api_key}


def test_lab_pki_current_needs_nothing(lab):
    assert assess(parse(wanted(lab["path"])), now=NOW) == {"keys": [], "certificates": [], "reasons": {}}


def test_lab_pki_other_sans_mark_that_certificate_only(lab):
    write_cert(lab["path"] / "apiserver.crt", lab["api_key"], "kube-apiserver", lab["ca_key"], lab["ca"].subject,
               san=("DNS:localhost",))
    found = assess(parse(wanted(lab["path"])), now=NOW)
    assert found["keys"] == [] and found["certificates"] == ["apiserver"]
    assert "has SANs" in found["reasons"]["apiserver"]


def test_lab_pki_a_new_ca_marks_what_the_old_one_signed(lab):
    write_key(lab["path"] / "ca.key")
    found = assess(parse(wanted(lab["path"])), now=NOW)
    assert found["certificates"] == ["ca", "apiserver", "admin"]
    assert found["reasons"]["apiserver"] == "its issuer ca is issued again"


def test_lab_pki_signed_by_another_ca_is_stale(lab):
    other = ec.generate_private_key(ec.SECP256R1())
    write_cert(lab["path"] / "apiserver.crt", lab["api_key"], "kube-apiserver", other, lab["ca"].subject,
               san=("IP:127.0.0.1", "DNS:localhost"))
    found = assess(parse(wanted(lab["path"])), now=NOW)
    assert found["certificates"] == ["apiserver"] and "not signed by ca" in found["reasons"]["apiserver"]


def test_lab_pki_loose_key_mode_and_missing_cert(lab):
    os.chmod(lab["path"] / "admin.key", 0o644)
    (lab["path"] / "apiserver.crt").unlink()
    found = assess(parse(wanted(lab["path"])), now=NOW)
    assert found["keys"] == ["admin"] and found["certificates"] == ["apiserver", "admin"]
    assert "mode 0644, not 0600" in found["reasons"]["admin"]
    assert "is missing" in found["reasons"]["apiserver"]


def test_lab_pki_near_expiry_is_stale(lab):
    write_cert(lab["path"] / "admin.crt", ec.generate_private_key(ec.SECP256R1()), "admin", lab["ca_key"],
               lab["ca"].subject, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    found = assess(parse(wanted(lab["path"])), now=NOW)
    assert "does not hold the public half" in found["reasons"]["admin"]
    admin_key = serialization.load_pem_private_key((lab["path"] / "admin.key").read_bytes(), password=None)
    write_cert(lab["path"] / "admin.crt", admin_key, "admin", lab["ca_key"], lab["ca"].subject, days=10,
               usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    found = assess(parse(wanted(lab["path"])), min_days=30, now=NOW)
    assert found["certificates"] == ["admin"] and "less than 30 days left" in found["reasons"]["admin"]


@pytest.mark.parametrize("change, field", [
    (lambda entries: entries[1].update(san=["URI:x"]), "certificates[1].san[0]"),
    (lambda entries: entries[1].update(san=["IP:not-an-ip"]), "certificates[1].san[0]"),
    (lambda entries: entries[2].update(extended_usage=["codeSigning"]), "certificates[2].extended_usage[0]"),
    (lambda entries: entries[2].update(issuer="front-proxy-ca"), "certificates[2].issuer"),
    (lambda entries: entries[2].update(key="admin.key"), "certificates[2].key"),
    (lambda entries: entries[2].update(name="ca"), "certificates[2].name"),
    (lambda entries: entries[0].update(issuer="admin"), "certificates[0].issuer"),
    (lambda entries: entries[1].pop("common_name"), "certificates[1].common_name"),
    (lambda entries: entries[0].update(read_only="yes"), "certificates[0].read_only"),
    (lambda entries: entries.insert(0, {"name": "root", "key": "/r.key", "cert": "/r.crt", "read_only": True})
     or entries[1].update(read_only=True, issuer="root"), "certificates[1].issuer"),
])
def test_lab_pki_bad_entry_names_the_field(tmp_path, change, field):
    entries = wanted(tmp_path)
    change(entries)
    with pytest.raises(FieldError) as raised:
        parse(entries)
    assert raised.value.field == field


# -- issuing (lab_pki) -------------------------------------------------------------------------------
def issue_all(path: Path, now=NOW, check_mode=False):
    specs = parse(wanted(path))
    return issue(specs, assess(specs, now=now), now=now, check_mode=check_mode)


def files(path: Path):
    return {entry.name: (entry.read_bytes(), stat.S_IMODE(entry.stat().st_mode)) for entry in sorted(path.iterdir())}


def test_a_new_lab_gets_every_key_and_certificate_and_then_needs_nothing(tmp_path):
    made = issue_all(tmp_path)
    assert made == {"keys": ["ca", "apiserver", "admin"], "certificates": ["ca", "apiserver", "admin"]}
    assert assess(parse(wanted(tmp_path)), now=NOW) == {"keys": [], "certificates": [], "reasons": {}}
    modes = {name: mode for name, (_data, mode) in files(tmp_path).items()}
    assert modes == {"admin.crt": 0o644, "admin.key": 0o600, "apiserver.crt": 0o644, "apiserver.key": 0o600,
                     "ca.crt": 0o644, "ca.key": 0o600}
    before = files(tmp_path)
    assert issue_all(tmp_path) == {"keys": [], "certificates": []} and files(tmp_path) == before
    # What the community.crypto steps made: a CA with critical constraints and usages, leaves it signed
    # with their SANs and usages, key identifiers that chain.
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    api = x509.load_pem_x509_certificate((tmp_path / "apiserver.crt").read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).critical
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    assert api.issuer == ca.subject and not api.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert (api.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value.key_identifier
            == ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest)
    assert (api.not_valid_after_utc - api.not_valid_before_utc).days == 3650
    assert (tmp_path / "ca.key").read_bytes().startswith(b"-----BEGIN EC PRIVATE KEY-----")


def test_what_it_issues_serves_tls_with_pythons_ssl(tmp_path):
    issue_all(tmp_path, now=datetime.datetime.now(datetime.timezone.utc))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(str(tmp_path / "apiserver.crt"), str(tmp_path / "apiserver.key"))
    client = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    client.load_cert_chain(str(tmp_path / "admin.crt"), str(tmp_path / "admin.key"))
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        accepted = {}

        def serve():
            conn, _addr = listener.accept()
            with server.wrap_socket(conn, server_side=True) as tls:
                accepted["version"] = tls.version()

        thread = threading.Thread(target=serve, name="gpufleet-test-tls", daemon=True)
        thread.start()
        raw = socket.create_connection(("127.0.0.1", port))
        with client.wrap_socket(raw, server_hostname="localhost") as tls:
            assert tls.getpeercert()["subject"] == ((("commonName", "kube-apiserver"),),)
        thread.join(5)
    assert accepted["version"].startswith("TLS")


def test_a_stale_certificate_is_issued_again_alone_and_a_new_ca_issues_all_it_signed(lab):
    write_cert(lab["path"] / "apiserver.crt", lab["api_key"], "kube-apiserver", lab["ca_key"], lab["ca"].subject,
               san=("DNS:localhost",))
    before = files(lab["path"])
    assert issue_all(lab["path"]) == {"keys": [], "certificates": ["apiserver"]}
    after = files(lab["path"])
    assert [name for name in after if after[name] != before[name]] == ["apiserver.crt"]
    (lab["path"] / "ca.key").unlink()
    assert issue_all(lab["path"]) == {"keys": ["ca"], "certificates": ["ca", "apiserver", "admin"]}
    assert assess(parse(wanted(lab["path"])), now=NOW)["certificates"] == []


def test_check_mode_says_what_it_would_make_and_writes_nothing(tmp_path):
    assert issue_all(tmp_path, check_mode=True) == {"keys": ["ca", "apiserver", "admin"],
                                                    "certificates": ["ca", "apiserver", "admin"]}
    assert list(tmp_path.iterdir()) == []


# -- a CA made elsewhere (read_only) -------------------------------------------------------------------
def leaves_of_a_read_only_ca(path: Path):
    """The health agents' case: the kubernetes role's CA, read only, then client certificates it signs."""
    return [{"name": "lab CA", "key": str(path / "ca.key"), "cert": str(path / "ca.crt"), "read_only": True}] + [
        {"name": node, "key": str(path / (node + ".key")), "cert": str(path / (node + ".crt")),
         "common_name": "gpufleet:health-agent:" + node, "organization": "gpufleet:health-agents",
         "extended_usage": ["clientAuth"], "key_usage": ["digitalSignature"], "issuer": "lab CA"}
        for node in ("gpu-0", "gpu-1")]


def test_a_read_only_ca_signs_the_missing_certificates_and_is_never_written(lab):
    before = files(lab["path"])
    specs = parse(leaves_of_a_read_only_ca(lab["path"]))
    made = issue(specs, assess(specs, now=NOW), now=NOW)
    assert made == {"keys": ["gpu-0", "gpu-1"], "certificates": ["gpu-0", "gpu-1"]}
    after = files(lab["path"])
    assert {name: after[name] for name in before} == before
    gpu0 = x509.load_pem_x509_certificate((lab["path"] / "gpu-0.crt").read_bytes())
    assert gpu0.issuer == lab["ca"].subject
    assert gpu0.subject.rfc4514_string() == "O=gpufleet:health-agents,CN=gpufleet:health-agent:gpu-0"
    assert assess(specs, now=NOW) == {"keys": [], "certificates": [], "reasons": {}}
    # Its CA changes (a new lab): what it signed is issued again, the CA is still not written.
    ca_key = write_key(lab["path"] / "ca.key")
    write_cert(lab["path"] / "ca.crt", ca_key, "lab-ca", ca=True)
    found = assess(specs, now=NOW)
    assert found["certificates"] == ["gpu-0", "gpu-1"] and "not signed by lab CA" in found["reasons"]["gpu-0"]
    assert issue(specs, found, now=NOW) == {"keys": [], "certificates": ["gpu-0", "gpu-1"]}
    assert assess(specs, now=NOW)["certificates"] == []


@pytest.mark.parametrize("breakage, reason", [
    (lambda path: (path / "ca.key").unlink(), "No such file"),
    (lambda path: write_key(path / "ca.key"), "does not hold the public half"),
    (lambda path: write_cert(path / "ca.crt", serialization.load_pem_private_key(
        (path / "ca.key").read_bytes(), password=None), "lab-ca"), "is not a CA"),
])
def test_an_unusable_read_only_ca_fails_and_nothing_is_written(lab, breakage, reason):
    specs = parse(leaves_of_a_read_only_ca(lab["path"]))
    issue(specs, assess(specs, now=NOW), now=NOW)
    breakage(lab["path"])
    before = files(lab["path"])
    found = assess(specs, now=NOW)
    assert found["keys"] == [] and found["certificates"] == ["lab CA", "gpu-0", "gpu-1"]
    assert reason in found["reasons"]["lab CA"] and found["reasons"]["gpu-0"] == "its issuer lab CA is not usable"
    # A dry run (the CA's role made nothing yet either) says what a real run would issue, never the CA.
    assert issue(specs, found, now=NOW, check_mode=True) == {"keys": [], "certificates": ["gpu-0", "gpu-1"]}
    with pytest.raises(PkiError, match=r"lab CA: read-only issuer.*never written"):
        issue(specs, found, now=NOW)
    assert files(lab["path"]) == before


# The service-account key pair: a key with no certificate and its public half beside it.
def pair_params(path: Path, certificates=()):
    return {"certificates": list(certificates), "min_days": 30,
            "key_pairs": [{"name": "service-account", "key": str(path / "sa.key"), "public": str(path / "sa.pub")}]}


def test_a_key_pair_is_made_once_its_public_half_matches_and_a_rerun_writes_nothing(tmp_path):
    first = answer(pair_params(tmp_path), write=True)
    assert first["changed"] and first["keys"] == ["service-account"] and first["public_keys"] == ["service-account"]
    assert stat.S_IMODE(os.stat(tmp_path / "sa.key").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "sa.pub").st_mode) == 0o644
    key = serialization.load_pem_private_key((tmp_path / "sa.key").read_bytes(), password=None)
    public = serialization.load_pem_public_key((tmp_path / "sa.pub").read_bytes())
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1"
    assert public.public_numbers() == key.public_key().public_numbers()
    before = (tmp_path / "sa.key").read_bytes()
    again = answer(pair_params(tmp_path), write=True)
    assert not again["changed"] and again["keys"] == [] and again["public_keys"] == []
    assert (tmp_path / "sa.key").read_bytes() == before


def test_a_public_key_of_another_key_is_written_again_and_the_key_is_kept(tmp_path):
    answer(pair_params(tmp_path), write=True)
    key_bytes = (tmp_path / "sa.key").read_bytes()
    other = ec.generate_private_key(ec.SECP256R1()).public_key()
    (tmp_path / "sa.pub").write_bytes(other.public_bytes(serialization.Encoding.PEM,
                                                         serialization.PublicFormat.SubjectPublicKeyInfo))
    info = answer(pair_params(tmp_path), write=False)
    assert info["keys"] == [] and info["public_keys"] == ["service-account"]
    assert "not the public half" in info["reasons"]["service-account"]
    fixed = answer(pair_params(tmp_path), write=True)
    assert fixed["changed"] and fixed["keys"] == []
    assert (tmp_path / "sa.key").read_bytes() == key_bytes
    key = serialization.load_pem_private_key(key_bytes, password=None)
    public = serialization.load_pem_public_key((tmp_path / "sa.pub").read_bytes())
    assert public.public_numbers() == key.public_key().public_numbers()


def test_a_loose_key_is_made_again_with_its_public_half_and_check_mode_writes_nothing(tmp_path):
    answer(pair_params(tmp_path), write=True)
    os.chmod(tmp_path / "sa.key", 0o644)
    key_bytes = (tmp_path / "sa.key").read_bytes()
    checked = answer(pair_params(tmp_path), write=True, check_mode=True)
    assert checked["changed"] and checked["keys"] == ["service-account"]
    assert (tmp_path / "sa.key").read_bytes() == key_bytes
    made = answer(pair_params(tmp_path), write=True)
    assert made["keys"] == ["service-account"] and (tmp_path / "sa.key").read_bytes() != key_bytes
    assert stat.S_IMODE(os.stat(tmp_path / "sa.key").st_mode) == 0o600


@pytest.mark.parametrize("change, field", [
    ({"public": "sa.pub"}, "key_pairs[0].public"),
    ({"key": ""}, "key_pairs[0].key"),
    ({"name": "ca"}, "key_pairs[0].name"),
])
def test_a_bad_key_pair_names_the_field_and_writes_nothing(tmp_path, change, field):
    params = pair_params(tmp_path, certificates=wanted(tmp_path)[:1])
    params["key_pairs"][0].update(change)
    with pytest.raises(FieldError) as error:
        answer(params, write=True)
    assert error.value.field == field
    assert not (tmp_path / "sa.key").exists()
