# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Which of the lab's keys and certificates must be (re)issued: all of them read in one run.

The roles issue keys and certificates with community.crypto, a module run per key, per CSR and
per signature. On a rerun nearly all of them are current; ``assess`` says which are not, so the
roles run those steps for these alone. A certificate is current when its file and its key's
file are there with their modes, the key is an ECDSA P-256 key, the certificate holds that key's
public half, its issuer (the CA named by ``issuer``, or itself) signed it, its subject, SANs, key
usages and CA flag are those wanted, and it is valid now and for ``min_days`` more. A stale issuer
makes what it signed stale too.

Needs ``cryptography`` (community.crypto's backend) on the host that holds the files.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import stat
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError

KEY_MODE = 0o600
CERT_MODE = 0o644
# Names as community.crypto spells them -> cryptography's ExtendedKeyUsage OIDs (dotted).
EXTENDED_USAGES = {"serverAuth": "1.3.6.1.5.5.7.3.1", "clientAuth": "1.3.6.1.5.5.7.3.2"}
KEY_USAGES = {
    "digitalSignature": "digital_signature", "keyEncipherment": "key_encipherment",
    "keyCertSign": "key_cert_sign", "cRLSign": "crl_sign",
}


@dataclass(frozen=True)
class CertSpec:
    """One wanted certificate and its key; ``issuer`` names another spec (its CA), or None: self-signed."""

    name: str
    key: str
    cert: str
    common_name: str
    organization: Optional[str] = None
    san: Tuple[str, ...] = ()
    extended_usage: Tuple[str, ...] = ()
    key_usage: Tuple[str, ...] = ()
    ca: bool = False
    issuer: Optional[str] = None


def _strings(value: Any, field: str) -> Tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise FieldError(field, "must be a list of strings")
    return tuple(value)


def parse(entries: Sequence[Any], field: str = "certificates") -> List[CertSpec]:
    """The entries as CertSpecs; a FieldError names the bad one (``certificates[2].san[1]``)."""
    if not isinstance(entries, (list, tuple)):
        raise FieldError(field, "must be a list")
    specs: List[CertSpec] = []
    names: Dict[str, int] = {}
    for index, entry in enumerate(entries):
        where = "%s[%d]" % (field, index)
        if not isinstance(entry, Mapping):
            raise FieldError(where, "must be a mapping")
        for key in ("name", "key", "cert", "common_name"):
            if not isinstance(entry.get(key), str) or not entry.get(key):
                raise FieldError("%s.%s" % (where, key), "is required (a non-empty string)")
        for key in ("key", "cert"):
            if not os.path.isabs(entry[key]):
                raise FieldError("%s.%s" % (where, key), "must be an absolute path, not %r" % entry[key])
        if entry["name"] in names:
            raise FieldError(where + ".name", "%r is also %s[%d]" % (entry["name"], field, names[entry["name"]]))
        names[entry["name"]] = index
        san = _strings(entry.get("san"), where + ".san")
        for position, item in enumerate(san):
            kind, _sep, value = item.partition(":")
            if kind not in ("DNS", "IP") or not value:
                raise FieldError("%s.san[%d]" % (where, position), "must be DNS:<name> or IP:<address>, not %r" % item)
            if kind == "IP":
                try:
                    ipaddress.ip_address(value)
                except ValueError:
                    raise FieldError("%s.san[%d]" % (where, position), "%r is not an IP address" % value) from None
        usages = _strings(entry.get("extended_usage"), where + ".extended_usage")
        for position, usage in enumerate(usages):
            if usage not in EXTENDED_USAGES:
                raise FieldError("%s.extended_usage[%d]" % (where, position),
                                 "%r is not one of %s" % (usage, ", ".join(EXTENDED_USAGES)))
        key_usage = _strings(entry.get("key_usage"), where + ".key_usage")
        for position, usage in enumerate(key_usage):
            if usage not in KEY_USAGES:
                raise FieldError("%s.key_usage[%d]" % (where, position),
                                 "%r is not one of %s" % (usage, ", ".join(KEY_USAGES)))
        ca = entry.get("ca", False)
        if not isinstance(ca, bool):
            raise FieldError(where + ".ca", "must be true or false")
        issuer = entry.get("issuer") or None
        specs.append(CertSpec(name=entry["name"], key=entry["key"], cert=entry["cert"],
                              common_name=entry["common_name"], organization=entry.get("organization") or None,
                              san=san, extended_usage=usages, key_usage=key_usage, ca=ca, issuer=issuer))
    for index, spec in enumerate(specs):
        if spec.issuer is not None and spec.issuer not in names:
            raise FieldError("%s[%d].issuer" % (field, index), "%r names no entry of %s" % (spec.issuer, field))
        if spec.issuer is not None and names[spec.issuer] >= index:
            raise FieldError("%s[%d].issuer" % (field, index), "%r must come before the certificates it signs"
                             % spec.issuer)
    return specs


def _mode_ok(path: str, mode: int) -> Optional[str]:
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return "%s is missing" % path
    if not stat.S_ISREG(found.st_mode):
        return "%s is not a regular file" % path
    if stat.S_IMODE(found.st_mode) != mode:
        return "%s has mode %04o, not %04o" % (path, stat.S_IMODE(found.st_mode), mode)
    return None


def _load_key(path: str):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    with open(path, "rb") as handle:
        key = serialization.load_pem_private_key(handle.read(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ValueError("not an ECDSA P-256 key")
    return key


def _load_cert(path: str):
    from cryptography import x509

    with open(path, "rb") as handle:
        return x509.load_pem_x509_certificate(handle.read())


def _public_bytes(public_key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _signed_by(cert, issuer_cert) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric import ec

    if cert.issuer != issuer_cert.subject:
        return False
    try:
        issuer_cert.public_key().verify(cert.signature, cert.tbs_certificate_bytes,
                                        ec.ECDSA(cert.signature_hash_algorithm))
    except (InvalidSignature, TypeError, ValueError):
        return False
    return True


def _extension(cert, oid_class):
    from cryptography import x509

    try:
        return cert.extensions.get_extension_for_class(oid_class).value
    except x509.ExtensionNotFound:
        return None


def _cert_problem(spec: CertSpec, cert, key, issuer_cert, now: datetime.datetime, min_days: float) -> Optional[str]:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    if _public_bytes(cert.public_key()) != _public_bytes(key.public_key()):
        return "does not hold the public half of %s" % spec.key
    if not _signed_by(cert, issuer_cert if issuer_cert is not None else cert):
        return "is not signed by %s" % (spec.issuer or "itself")
    not_before = cert.not_valid_before_utc
    not_after = cert.not_valid_after_utc
    if now < not_before:
        return "is not valid before %s" % not_before.isoformat()
    if not_after - now < datetime.timedelta(days=min_days):
        return "expires %s (less than %g days left)" % (not_after.isoformat(), min_days)
    names = [attr.value for attr in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if names != [spec.common_name]:
        return "has common name %s, not %s" % (names, spec.common_name)
    orgs = [attr.value for attr in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)]
    if orgs != ([spec.organization] if spec.organization else []):
        return "has organization %s, not %s" % (orgs, spec.organization)
    san = _extension(cert, x509.SubjectAlternativeName)
    found = set()
    if san is not None:
        found |= {"DNS:%s" % name for name in san.get_values_for_type(x509.DNSName)}
        found |= {"IP:%s" % address for address in san.get_values_for_type(x509.IPAddress)}
    wanted = {"%s:%s" % (kind, ipaddress.ip_address(value) if kind == "IP" else value)
              for kind, _sep, value in (item.partition(":") for item in spec.san)}
    if found != wanted:
        return "has SANs %s, not %s" % (sorted(found), sorted(wanted))
    eku = _extension(cert, x509.ExtendedKeyUsage)
    found_eku = {oid.dotted_string for oid in eku} if eku is not None else set()
    if found_eku != {EXTENDED_USAGES[usage] for usage in spec.extended_usage}:
        return "has other extended key usages than %s" % ", ".join(spec.extended_usage)
    usage = _extension(cert, x509.KeyUsage)
    if spec.key_usage and (usage is None or not all(getattr(usage, KEY_USAGES[name]) for name in spec.key_usage)):
        return "lacks key usage %s" % ", ".join(spec.key_usage)
    constraints = _extension(cert, x509.BasicConstraints)
    if bool(constraints is not None and constraints.ca) != spec.ca:
        return "is %sa CA" % ("not " if spec.ca else "")
    return None


def assess(specs: Sequence[CertSpec], min_days: float = 30.0,
           now: Optional[datetime.datetime] = None) -> Dict[str, Any]:
    """Read every key and certificate: {"keys": names whose key must be made (missing, unreadable,
    wrong mode or type), "certificates": names whose certificate must be issued, "reasons": name -> why}.
    A stale key or issuer makes the certificate stale; nothing is written."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    keys: List[str] = []
    certs: List[str] = []
    reasons: Dict[str, str] = {}
    loaded: Dict[str, Any] = {}
    for spec in specs:
        problem = _mode_ok(spec.key, KEY_MODE)
        key = None
        if problem is None:
            try:
                key = _load_key(spec.key)
            except (OSError, ValueError, TypeError) as exc:
                problem = "%s: %s" % (spec.key, exc)
        if problem is not None:
            keys.append(spec.name)
            certs.append(spec.name)
            reasons[spec.name] = "key " + problem
            continue
        if spec.issuer is not None and spec.issuer in certs:
            certs.append(spec.name)
            reasons[spec.name] = "its issuer %s is issued again" % spec.issuer
            continue
        problem = _mode_ok(spec.cert, CERT_MODE)
        if problem is None:
            try:
                cert = _load_cert(spec.cert)
            except (OSError, ValueError) as exc:
                problem = "%s: %s" % (spec.cert, exc)
            else:
                loaded[spec.name] = cert
                found = _cert_problem(spec, cert, key, loaded.get(spec.issuer) if spec.issuer else None, now,
                                      min_days)
                if found is not None:
                    problem = "%s %s" % (spec.cert, found)
        if problem is not None:
            certs.append(spec.name)
            reasons[spec.name] = "certificate " + problem
    return {"keys": keys, "certificates": certs, "reasons": reasons}
