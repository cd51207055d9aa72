# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The lab's keys and certificates: which must be (re)issued (``assess``), and issuing them (``issue``),
each in one module run for all of them.

community.crypto made them with a module run per key, per CSR and per signature: about 30 runs and
20 s of CPU for a new lab's control plane, once per lab the tests bring up. ``issue`` makes the same
keys and certificates with ``cryptography`` (community.crypto's own backend) in one run, and
``assess`` reads them back in one run: on a rerun nearly all are current and nothing is written. A
certificate is current when its file and its key's
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

try:
    import cryptography  # noqa: F401  pylint: disable=unused-import
    HAS_CRYPTOGRAPHY = True
except ImportError:
    HAS_CRYPTOGRAPHY = False

# The options of lab_pki_info and lab_pki (doc fragment gpufleet.resilience.lab_pki).
ARGUMENT_SPEC: Dict[str, Any] = dict(
    certificates=dict(type="list", elements="dict", required=True, options=dict(
        name=dict(type="str", required=True),
        key=dict(type="path", required=True, no_log=False),
        cert=dict(type="path", required=True),
        common_name=dict(type="str"),
        organization=dict(type="str"),
        san=dict(type="list", elements="str", default=[]),
        extended_usage=dict(type="list", elements="str", default=[]),
        key_usage=dict(type="list", elements="str", default=[]),
        ca=dict(type="bool", default=False),
        issuer=dict(type="str"),
        read_only=dict(type="bool", default=False),
    )),
    key_pairs=dict(type="list", elements="dict", default=[], no_log=False, options=dict(
        name=dict(type="str", required=True),
        key=dict(type="path", required=True, no_log=False),
        public=dict(type="path", required=True),
    )),
    min_days=dict(type="float", default=30),
)

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
    # Made by another role (the kubernetes role's lab CA): read as an issuer, never written.
    read_only: bool = False


@dataclass(frozen=True)
class KeyPairSpec:
    """A key with no certificate, and its public half in a file of its own (the API server's
    service-account signing key: the controller manager signs with the private half, the API server
    verifies with the public one)."""

    name: str
    key: str
    public: str


def _strings(value: Any, field: str) -> Tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
        raise FieldError(field, "must be a list of strings")
    return tuple(value)


def _require(entry: Mapping[str, Any], where: str, strings: Sequence[str], paths: Sequence[str]) -> None:
    """FieldError naming the first of ``strings`` that is not a non-empty string, or of ``paths`` that is
    not absolute."""
    for key in strings:
        if not isinstance(entry.get(key), str) or not entry.get(key):
            raise FieldError("%s.%s" % (where, key), "is required (a non-empty string)")
    for key in paths:
        if not os.path.isabs(entry[key]):
            raise FieldError("%s.%s" % (where, key), "must be an absolute path, not %r" % entry[key])


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
        read_only = entry.get("read_only", False)
        if not isinstance(read_only, bool):
            raise FieldError(where + ".read_only", "must be true or false")
        _require(entry, where, ("name", "key", "cert") + (() if read_only else ("common_name",)), ("key", "cert"))
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
        if read_only and issuer is not None:
            raise FieldError(where + ".issuer", "a read_only entry is only read, so it names no issuer")
        specs.append(CertSpec(name=entry["name"], key=entry["key"], cert=entry["cert"],
                              common_name=entry.get("common_name") or "",
                              organization=entry.get("organization") or None,
                              san=san, extended_usage=usages, key_usage=key_usage, ca=ca, issuer=issuer,
                              read_only=read_only))
    for index, spec in enumerate(specs):
        if spec.issuer is not None and spec.issuer not in names:
            raise FieldError("%s[%d].issuer" % (field, index), "%r names no entry of %s" % (spec.issuer, field))
        if spec.issuer is not None and names[spec.issuer] >= index:
            raise FieldError("%s[%d].issuer" % (field, index), "%r must come before the certificates it signs"
                             % spec.issuer)
    return specs


def parse_key_pairs(entries: Sequence[Any], taken: Sequence[str] = (), field: str = "key_pairs") -> List[KeyPairSpec]:
    """The entries as KeyPairSpecs; a FieldError names the bad one. ``taken``: the certificates' names,
    which a key pair may not reuse (the results list both by name)."""
    if not isinstance(entries, (list, tuple)):
        raise FieldError(field, "must be a list")
    specs: List[KeyPairSpec] = []
    names = set(taken)
    for index, entry in enumerate(entries):
        where = "%s[%d]" % (field, index)
        if not isinstance(entry, Mapping):
            raise FieldError(where, "must be a mapping")
        _require(entry, where, ("name", "key", "public"), ("key", "public"))
        if entry["name"] in names:
            raise FieldError(where + ".name", "%r names another entry already" % entry["name"])
        names.add(entry["name"])
        specs.append(KeyPairSpec(name=entry["name"], key=entry["key"], public=entry["public"]))
    return specs


def check_min_days(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 36500:
        raise FieldError("min_days", "must be a number of days from 0 to 36500, got %r" % (value,))
    return float(value)


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


def _read_key(path: str) -> Tuple[Any, Optional[str]]:
    """(the key, None), or (None, why it must be made again: missing, another mode, unreadable, not P-256)."""
    problem = _mode_ok(path, KEY_MODE)
    if problem is not None:
        return None, problem
    try:
        return _load_key(path), None
    except (OSError, ValueError, TypeError) as exc:
        return None, "%s: %s" % (path, exc)


def _key_or_mark(spec: Any, reasons: Dict[str, str], *stale: List[str]) -> Any:
    """The key of ``spec`` (a CertSpec or a KeyPairSpec), or None after adding its name to each of
    ``stale`` (what must be made again with a new key) and saying why in ``reasons``."""
    key, problem = _read_key(spec.key)
    if problem is not None:
        for names in stale:
            names.append(spec.name)
        reasons[spec.name] = "key " + problem
    return key


def _load_cert(path: str):
    from cryptography import x509

    with open(path, "rb") as handle:
        return x509.load_pem_x509_certificate(handle.read())


def _public_bytes(public_key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _holds(cert, key) -> bool:
    """Whether ``cert`` holds the public half of ``key``."""
    return _public_bytes(cert.public_key()) == _public_bytes(key.public_key())


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

    if not _holds(cert, key):
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


def _issuer_problem(spec: CertSpec, now: datetime.datetime, loaded: Dict[str, Any]) -> Optional[str]:
    """Why a read_only entry (another role's CA) cannot sign, or None (its certificate then in ``loaded``):
    its key and certificate must load, match, be a CA and be valid now. Its subject and usages are its
    maker's business."""
    from cryptography import x509

    try:
        key = _load_key(spec.key)
        cert = _load_cert(spec.cert)
    except (OSError, ValueError, TypeError) as exc:
        return "read-only issuer: %s" % exc
    if not _holds(cert, key):
        return "read-only issuer: %s does not hold the public half of %s" % (spec.cert, spec.key)
    constraints = _extension(cert, x509.BasicConstraints)
    if constraints is None or not constraints.ca:
        return "read-only issuer: %s is not a CA" % spec.cert
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        return "read-only issuer: %s is not valid now" % spec.cert
    loaded[spec.name] = cert
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
    read_only = {spec.name for spec in specs if spec.read_only}
    for spec in specs:
        if spec.read_only:
            problem = _issuer_problem(spec, now, loaded)
            if problem is not None:
                certs.append(spec.name)
                reasons[spec.name] = problem
            continue
        key = _key_or_mark(spec, reasons, keys, certs)
        if key is None:
            continue
        if spec.issuer is not None and spec.issuer in certs:
            certs.append(spec.name)
            reasons[spec.name] = "its issuer %s is %s" % (
                spec.issuer, "not usable" if spec.issuer in read_only else "issued again")
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


def assess_key_pairs(specs: Sequence[KeyPairSpec]) -> Dict[str, Any]:
    """Read every key pair: {"keys": names whose private key must be made (missing, unreadable, wrong mode
    or type), "public_keys": names whose public file must be written (missing, wrong mode, not the key's
    public half, or its key made again), "reasons": name -> why}."""
    from cryptography.hazmat.primitives import serialization

    keys: List[str] = []
    public: List[str] = []
    reasons: Dict[str, str] = {}
    for spec in specs:
        key = _key_or_mark(spec, reasons, keys, public)
        if key is None:
            continue
        problem = _mode_ok(spec.public, CERT_MODE)
        if problem is None:
            try:
                with open(spec.public, "rb") as handle:
                    found = serialization.load_pem_public_key(handle.read())
            except (OSError, ValueError, TypeError) as exc:
                problem = "%s: %s" % (spec.public, exc)
            else:
                if _public_bytes(found) != _public_bytes(key.public_key()):
                    problem = "%s is not the public half of %s" % (spec.public, spec.key)
        if problem is not None:
            public.append(spec.name)
            reasons[spec.name] = "public key " + problem
    return {"keys": keys, "public_keys": public, "reasons": reasons}


def make_key_pairs(specs: Sequence[KeyPairSpec], found: Mapping[str, Any]) -> None:
    """Make the keys and write the public halves that ``assess_key_pairs`` found (``found``)."""
    from cryptography.hazmat.primitives import serialization

    for spec in specs:
        if spec.name not in found["public_keys"]:
            continue
        key = _new_key(spec) if spec.name in found["keys"] else _load_key(spec.key)
        _write(spec.public, key.public_key().public_bytes(serialization.Encoding.PEM,
                                                          serialization.PublicFormat.SubjectPublicKeyInfo),
               CERT_MODE)


class PkiError(Exception):
    """A read_only issuer cannot sign: nothing is written."""


# What ``issue`` writes (community.crypto's defaults for what the roles asked of it): an ECDSA P-256
# key in PEM (the "EC PRIVATE KEY" form), certificates valid from now for VALID_DAYS, signed with
# ECDSA-SHA256, with a subject key identifier and (when a CA signs them) its authority key identifier.
VALID_DAYS = 3650


def _write(path: str, data: bytes, mode: int) -> None:
    """Write ``data`` beside ``path`` with ``mode`` from the start, then rename it over: a reader never
    sees half a key, and a key is never readable by others, not even for a moment."""
    temporary = "%s.tmp-%d" % (path, os.getpid())
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(handle, data)
        os.fchmod(handle, mode)
    finally:
        os.close(handle)
    os.replace(temporary, path)


def _new_key(spec: Any):
    """A new ECDSA P-256 key at ``spec.key`` (a CertSpec or a KeyPairSpec)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    _write(spec.key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                       serialization.NoEncryption()), KEY_MODE)
    return key


def _build(spec: CertSpec, key, issuer_cert, issuer_key, now: datetime.datetime):
    """The certificate of ``spec`` for ``key``, signed by ``issuer_key`` (None: by ``key``, self-signed)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import NameOID

    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, spec.common_name)]
    if spec.organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, spec.organization))
    subject = x509.Name(attributes)
    usage = set(spec.key_usage)
    start = now.replace(microsecond=0)
    builder = (x509.CertificateBuilder()
               .subject_name(subject)
               .issuer_name(issuer_cert.subject if issuer_cert is not None else subject)
               .public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(start)
               .not_valid_after(start + datetime.timedelta(days=VALID_DAYS))
               # A CA's constraints and key usage are critical, a leaf's not (as the roles' CSRs had them).
               .add_extension(x509.BasicConstraints(ca=spec.ca, path_length=None), critical=spec.ca)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
    if usage:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature="digitalSignature" in usage, content_commitment=False,
            key_encipherment="keyEncipherment" in usage, data_encipherment=False, key_agreement=False,
            key_cert_sign="keyCertSign" in usage, crl_sign="cRLSign" in usage, encipher_only=False,
            decipher_only=False), critical=spec.ca)
    if spec.extended_usage:
        oids = [x509.ObjectIdentifier(EXTENDED_USAGES[name]) for name in spec.extended_usage]
        builder = builder.add_extension(x509.ExtendedKeyUsage(oids), critical=False)
    if spec.san:
        names = [x509.IPAddress(ipaddress.ip_address(value)) if kind == "IP" else x509.DNSName(value)
                 for kind, _sep, value in (item.partition(":") for item in spec.san)]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    if issuer_cert is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_cert.public_key()), critical=False)
    return builder.sign(issuer_key if issuer_key is not None else key, hashes.SHA256())


def issue(specs: Sequence[CertSpec], found: Mapping[str, Any], now: Optional[datetime.datetime] = None,
          check_mode: bool = False) -> Dict[str, Any]:
    """Make the keys and issue the certificates that ``assess`` found (``found``), in the specs' order,
    so that a CA is issued before what it signs. Returns what was (in check mode: would be) made."""
    from cryptography.hazmat.primitives import serialization

    now = now or datetime.datetime.now(datetime.timezone.utc)
    read_only = {spec.name for spec in specs if spec.read_only}
    made = {"keys": [name for name in found["keys"] if name not in read_only],
            "certificates": [name for name in found["certificates"] if name not in read_only]}
    if check_mode:
        return made
    unusable = [name for name in found["certificates"] if name in read_only]
    if unusable:
        raise PkiError("; ".join("%s: %s" % (name, found["reasons"][name]) for name in unusable)
                       + " (made elsewhere: it is read, never written)")
    by_name = {spec.name: spec for spec in specs}
    keys: Dict[str, Any] = {}
    certs: Dict[str, Any] = {}

    def key_of(spec: CertSpec):
        if spec.name not in keys:
            keys[spec.name] = _new_key(spec) if spec.name in found["keys"] else _load_key(spec.key)
        return keys[spec.name]

    def cert_of(spec: CertSpec):
        if spec.name not in certs:
            certs[spec.name] = _load_cert(spec.cert)
        return certs[spec.name]

    for spec in specs:
        if spec.read_only:
            continue
        if spec.name in found["keys"]:
            key_of(spec)
        if spec.name not in found["certificates"]:
            continue
        issuer = by_name[spec.issuer] if spec.issuer is not None else None
        cert = _build(spec, key_of(spec), cert_of(issuer) if issuer else None, key_of(issuer) if issuer else None,
                      now)
        _write(spec.cert, cert.public_bytes(serialization.Encoding.PEM), CERT_MODE)
        certs[spec.name] = cert
    return made


def answer(params: Mapping[str, Any], write: bool, check_mode: bool = False) -> Dict[str, Any]:
    """What lab_pki_info (``write=False``: which keys and certificates are stale) and lab_pki (makes
    them, in check mode says so) return for their options. FieldError names a bad one."""
    specs = parse(params["certificates"])
    pairs = parse_key_pairs(params.get("key_pairs") or [], taken=[spec.name for spec in specs])
    min_days = check_min_days(params["min_days"])
    found = assess(specs, min_days)
    pairs_found = assess_key_pairs(pairs)
    reasons = dict(found["reasons"], **pairs_found["reasons"])
    if not write:
        return dict(changed=False, keys=found["keys"] + pairs_found["keys"], certificates=found["certificates"],
                    public_keys=pairs_found["public_keys"], reasons=reasons)
    made = issue(specs, found, check_mode=check_mode)
    if not check_mode:
        make_key_pairs(pairs, pairs_found)
    keys = made["keys"] + pairs_found["keys"]
    return dict(changed=bool(keys or made["certificates"] or pairs_found["public_keys"]), reasons=reasons,
                keys=keys, certificates=made["certificates"], public_keys=pairs_found["public_keys"])


def run_module(module: Any, write: bool) -> None:
    """The main of lab_pki_info (``write=False``) and lab_pki, given their AnsibleModule: answer, or fail
    naming the bad option."""
    from ansible.module_utils.basic import missing_required_lib

    if not HAS_CRYPTOGRAPHY:
        module.fail_json(msg=missing_required_lib("cryptography"))
    try:
        result = answer(module.params, write=write, check_mode=module.check_mode)
    except (FieldError, PkiError) as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg="writing the lab's keys and certificates failed: %s" % exc)
    module.exit_json(**result)
