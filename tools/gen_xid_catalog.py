#!/usr/bin/env python
# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Generate plugins/module_utils/health/xid_catalog.py from NVIDIA's XID catalog (CSV export).

Run by hand when NVIDIA publishes a new catalog, never at build time:

    python3 tools/gen_xid_catalog.py            # rewrite the module from tests/fixtures/xid-catalog
    python3 tools/gen_xid_catalog.py --check    # exit 1 if it is stale (tests/unit/tools runs this)

A new catalog replaces the four CSVs in tests/fixtures/xid-catalog (gzipped; their README says
where they come from), then the module is generated again and reviewed.

Input: the four sheets of "Analyzing Xid Catalog" (docs.nvidia.com/deploy/xid-errors), as
embedded in NVIDIA NVSentinel and exported to CSV: xid-catalog.csv, xid-resolution-buckets.csv,
xid-144-150-decode.csv, xid-catalog-columns.csv. The output is deterministic (same CSVs, same
bytes) and records the SHA-256 of every input, so a reviewer sees exactly which catalog it holds.

Derivations (the catalog states buckets, not our actions or a fatal/non-fatal flag):

* action - the immediate-action bucket, mapped by BUCKET_ACTIONS below. Workflow buckets become
  the action of their default ("solo") branch; xid_rules applies the other branches:
  WORKFLOW_XID_45 -> RESTART_FM (IGNORE when not solo), WORKFLOW_XID_48 -> RESET_GPU
  (DRAIN_AND_RESET with 63/64), WORKFLOW_NVLINK_ERR / WORKFLOW_NVLINK5_ERR -> DECODE,
  XID_154 -> CONTACT_SUPPORT (only used when the recovery-action text cannot be read).
  Buckets a machine cannot act on go to a human: CHECK_MECHANICALS, UPDATE_SWFW -> CONTACT_SUPPORT.
  CHECK_UVM ("if UVM/vGPU is used RESET_GPU, otherwise IGNORE") -> RESET_GPU: the agent cannot
  tell whether a job used UVM, so it takes the branch that is safe for the job.
  An empty bucket (XIDs 162-172 in this catalog) -> CONTACT_SUPPORT, the catalog's own default.
* severity - "fatal" when the action takes the GPU out of service (RESET_GPU, DRAIN_AND_RESET,
  RESTART_BM, RESTART_VM) or hands it to a human (CONTACT_SUPPORT: the node is fenced and held
  until somebody looks), else "non-fatal". XID 154 gets its severity at run time from its text.
* NVLink5 decode rows - severity "non-fatal" when the sheet's Severity starts with "Non-fatal"
  ("Non-fatal*" rows become fatal at run time when their action-2 pattern applies), else "fatal"
  (Fatal, Fatal**, Link Fatal, Link Fatal?). A row whose action is IGNORE is always "non-fatal",
  whatever its Severity column says (two XID 149 rows say "Fatal"/"Link Fatal" next to IGNORE:
  the link event is fatal to the link, not to the GPU); ``severity_raw`` keeps the sheet's word.
  Bit patterns are 32 characters, MSB first: "-" is don't-care, so each becomes a (care mask,
  value) pair.

An unknown bucket or a changed header stops the generator: a new catalog must be reviewed, not
silently mapped.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import re
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA_DIR = REPO / "tests" / "fixtures" / "xid-catalog"
DEFAULT_OUTPUT = REPO / "plugins" / "module_utils" / "health" / "xid_catalog.py"

CATALOG_CSV = "xid-catalog.csv"
DECODE_CSV = "xid-144-150-decode.csv"
BUCKETS_CSV = "xid-resolution-buckets.csv"
COLUMNS_CSV = "xid-catalog-columns.csv"
INPUTS = (CATALOG_CSV, DECODE_CSV, BUCKETS_CSV, COLUMNS_CSV)

CATALOG_SOURCE = (
    "NVIDIA 'Analyzing Xid Catalog' (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), "
    "all four sheets as embedded in NVIDIA NVSentinel, exported to CSV"
)

BUCKET_ACTIONS = {
    "IGNORE": "IGNORE",
    "RESTART_APP": "RESTART_APP",
    "RESET_GPU": "RESET_GPU",
    "RESTART_BM": "RESTART_BM",
    "RESTART_VM": "RESTART_VM",
    "CONTACT_SUPPORT": "CONTACT_SUPPORT",
    "WORKFLOW_XID_45": "RESTART_FM",
    "WORKFLOW_XID_48": "RESET_GPU",
    "WORKFLOW_NVLINK_ERR": "DECODE",
    "WORKFLOW_NVLINK5_ERR": "DECODE",
    "XID_154": "CONTACT_SUPPORT",
    "CHECK_MECHANICALS": "CONTACT_SUPPORT",
    "UPDATE_SWFW": "CONTACT_SUPPORT",
    "CHECK_UVM": "RESET_GPU",
    "": "CONTACT_SUPPORT",
}
OUT_OF_SERVICE = {"RESET_GPU", "DRAIN_AND_RESET", "RESTART_BM", "RESTART_VM"}
# Actions whose XID fences the node: out of service, or held for a human.
FATAL_ACTIONS = OUT_OF_SERVICE | {"CONTACT_SUPPORT"}
DECODE_ACTIONS = {"IGNORE", "RESET_GPU", "XID_154_EVAL"}

CATALOG_HEADER = [
    "Type (XID)", "Code", "Mnemonic", "Description", "Applies to A100", "Applies to H100",
    "Applies to B100", "Applies to GB200", "Resolution Bucket (Immediate Action)",
    "Resolution Bucket (Investigatory Action)", "Xid 154 linkage", "Trigger Conditions",
]
DECODE_COLUMNS = 13

# Typographic characters become ASCII so messages grep well and the source stays ASCII
# (ansible-test's no-smart-quotes check); anything else non-ASCII is escaped by ascii().
ASCII_TRANSLATION = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-",
    "\u2022": "*", "\u00ae": "(R)", "\u00a0": " ", "\u2026": "...",
})


class CatalogError(Exception):
    pass


def clean(text: str) -> str:
    """ASCII-fold, strip each line's trailing blanks and the whole text's edges."""
    text = text.translate(ASCII_TRANSLATION).replace("\r\n", "\n").replace("\r", "\n")
    return "\n".join(line.rstrip() for line in text.split("\n")).strip()


def one_line(text: str) -> str:
    return re.sub(r"\s+", " ", clean(text))


def read_rows(raw: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(raw.decode("utf-8"), newline="")))


def parse_mask(pattern: str, where: str) -> tuple[int, int]:
    """A 32-character MSB-first pattern of 0/1/- as (care mask, value)."""
    pattern = pattern.strip()
    if not pattern:
        return 0, 0
    if len(pattern) != 32 or set(pattern) - set("01-"):
        raise CatalogError("%s: bad IntrInfo pattern %r" % (where, pattern))
    care = value = 0
    for position, char in enumerate(pattern):
        bit = 1 << (31 - position)
        if char != "-":
            care |= bit
            if char == "1":
                value |= bit
    return care, value


def parse_status(text: str, where: str) -> tuple[int, ...]:
    text = text.strip()
    if not text:
        return ()
    try:
        return tuple(int(part.strip(), 16) for part in text.split("/"))
    except ValueError:
        raise CatalogError("%s: bad error status %r" % (where, text)) from None


def catalog_entries(rows: list[list[str]]) -> list[dict]:
    if rows[0] != CATALOG_HEADER:
        raise CatalogError("%s: header changed: %r" % (CATALOG_CSV, rows[0]))
    products = [column.replace("Applies to ", "") for column in CATALOG_HEADER[4:8]]
    entries = []
    seen = set()
    for number, row in enumerate(rows[1:], start=2):
        where = "%s line %d" % (CATALOG_CSV, number)
        if len(row) != len(CATALOG_HEADER) or row[0] != "XID":
            raise CatalogError("%s: unexpected row %r" % (where, row[:3]))
        code = int(row[1])
        if code in seen:
            raise CatalogError("%s: XID %d listed twice" % (where, code))
        seen.add(code)
        bucket = one_line(row[8])
        if bucket not in BUCKET_ACTIONS:
            raise CatalogError("%s: unknown immediate bucket %r for XID %d: map it in BUCKET_ACTIONS"
                               % (where, bucket, code))
        action = BUCKET_ACTIONS[bucket]
        flags = [value.strip().upper() for value in row[4:8]]
        if set(flags) - {"YES", "NO"}:
            raise CatalogError("%s: applies-to flags must be YES/NO, got %r" % (where, flags))
        mnemonic = one_line(row[2])
        description = one_line(row[3])
        trigger = clean(row[11])
        entries.append(dict(
            code=code,
            mnemonic=mnemonic,
            name=mnemonic.split("/")[0].strip(),
            description=description,
            severity="fatal" if action in FATAL_ACTIONS else "non-fatal",
            action=action,
            immediate_bucket=bucket,
            investigatory_bucket=one_line(row[9]),
            applies_to=tuple(product for product, flag in zip(products, flags, strict=True) if flag == "YES"),
            xid_154_linkage=one_line(row[10]),
            trigger_conditions=trigger,
            unused=description == "Unused" or trigger.startswith("N/A; Unused"),
        ))
    return sorted(entries, key=lambda entry: entry["code"])


def decode_rules(rows: list[list[str]]) -> list[dict]:
    header = rows[0]
    if len(header) != DECODE_COLUMNS or header[0] != "Xid" or not header[5].startswith("Resolution Bucket"):
        raise CatalogError("%s: header changed: %r" % (DECODE_CSV, header))
    rules = []
    for number, row in enumerate(rows[1:], start=2):
        where = "%s line %d" % (DECODE_CSV, number)
        if len(row) != DECODE_COLUMNS:
            raise CatalogError("%s: expected %d columns, got %d" % (where, DECODE_COLUMNS, len(row)))
        xid = int(row[0])
        if not 144 <= xid <= 150:
            raise CatalogError("%s: XID %d outside 144-150" % (where, xid))
        action = one_line(row[5])
        if action not in DECODE_ACTIONS:
            raise CatalogError("%s: unknown decode action %r" % (where, action))
        action2 = one_line(row[8])
        if action2 and action2 not in DECODE_ACTIONS:
            raise CatalogError("%s: unknown action 2 %r" % (where, action2))
        subcode = one_line(row[1])
        names = [part.strip() for part in subcode.split("/")]
        v1_care, v1_value = parse_mask(row[2], where)
        v2_care, v2_value = parse_mask(row[3], where)
        a2_v1_care, a2_v1_value = parse_mask(row[6], where)
        a2_v2_care, a2_v2_value = parse_mask(row[7], where)
        severity_raw = one_line(row[10])
        rules.append(dict(
            xid=xid,
            subcode=subcode,
            subcode_v1=names[0],
            subcode_v2=names[-1],
            v1_care=v1_care,
            v1_value=v1_value,
            v2_care=v2_care,
            v2_value=v2_value,
            error_status=parse_status(row[4], where),
            action=action,
            investigatory_action=one_line(row[9]),
            severity=("non-fatal" if action == "IGNORE" or severity_raw.lower().startswith("non-fatal")
                      else "fatal"),
            severity_raw=severity_raw,
            hw_sw=one_line(row[11]),
            local_remote=clean(row[12]),
            action2=action2,
            action2_v1_care=a2_v1_care,
            action2_v1_value=a2_v1_value,
            action2_v2_care=a2_v2_care,
            action2_v2_value=a2_v2_value,
        ))
    return rules


def guidance(rows: list[list[str]]) -> dict[str, str]:
    if rows[0] != ["Guidance Class", "Resolution Action"]:
        raise CatalogError("%s: header changed: %r" % (BUCKETS_CSV, rows[0]))
    result = {}
    for row in rows[1:]:
        if len(row) != 2:
            raise CatalogError("%s: expected 2 columns, got %r" % (BUCKETS_CSV, row))
        # The sheet repeats INVESTIGATE_SW_USER; first wins, the rest are the same text.
        result.setdefault(one_line(row[0]), clean(row[1]))
    return result


# ---------------------------------------------------------------- rendering

def literal(value, indent: int) -> str:
    """Python source for a value; long strings wrap into implicit concatenation."""
    if isinstance(value, str):
        text = ascii(value)
        if len(text) <= 90:
            return text
        pad = " " * (indent + 4)
        pieces = textwrap.wrap(value, 80, drop_whitespace=False, replace_whitespace=False,
                               break_long_words=True, break_on_hyphens=False)
        if "".join(pieces) != value:  # textwrap must not lose a character
            pieces = [value[i:i + 80] for i in range(0, len(value), 80)]
        return "(\n" + "".join(pad + ascii(piece) + "\n" for piece in pieces) + " " * indent + ")"
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, tuple):
        inner = ", ".join(literal(item, indent) for item in value)
        return "(" + inner + ("," if len(value) == 1 else "") + ")"
    raise TypeError(type(value))


def render_call(name: str, values: dict, indent: int) -> str:
    pad = " " * (indent + 4)
    lines = [name + "("]
    for key, value in values.items():
        if key.endswith(("_care", "_value")):
            text = "0x%08x" % value
        elif key == "error_status":
            text = "(" + ", ".join("0x%08x" % status for status in value) + ("," if len(value) == 1 else "") + ")"
        else:
            text = literal(value, indent + 4)
        lines.append("%s%s=%s," % (pad, key, text))
    lines.append(" " * indent + ")")
    return "\n".join(lines)


def render(data_dir: Path, version: str | None) -> str:
    raw = {name: read_input(data_dir, name) for name in INPUTS}
    digests = {name: hashlib.sha256(raw[name]).hexdigest() for name in INPUTS}
    combined = hashlib.sha256("".join(digests[name] for name in INPUTS).encode()).hexdigest()
    entries = catalog_entries(read_rows(raw[CATALOG_CSV]))
    rules = decode_rules(read_rows(raw[DECODE_CSV]))
    guide = guidance(read_rows(raw[BUCKETS_CSV]))
    newest_driver = max((int(m) for e in entries for m in re.findall(r"R(\d{3})", e["xid_154_linkage"])), default=0)
    if version is None:
        version = "xid-%d-%d+r%d+sha256:%s" % (entries[0]["code"], entries[-1]["code"], newest_driver, combined[:12])

    out = [
        "# Copyright: (c) 2026, gpufleet.resilience contributors",
        "# Apache License 2.0 (see LICENSE)",
        "# GENERATED by tools/gen_xid_catalog.py from NVIDIA's XID catalog. Do not edit by hand:",
        "# change the generator or the CSVs and run it again.",
        '"""NVIDIA\'s XID catalog as data: one entry per XID, the NVLink5 144-150 decode table,',
        "and the resolution buckets' guidance. No I/O; see tools/gen_xid_catalog.py for how",
        'actions and severities are derived from the catalog\'s buckets."""',
        "",
        "from __future__ import annotations",
        "",
        "from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (",
        "    NvLink5DecodeRule,",
        "    XidCatalogEntry,",
        ")",
        "",
        "CATALOG_VERSION = %s" % ascii(version),
        "CATALOG_SOURCE = %s" % literal(CATALOG_SOURCE, 0),
        "CATALOG_SHA256 = {",
    ]
    out += ["    %s: %s," % (ascii(name), ascii(digests[name])) for name in INPUTS]
    out += [
        "}",
        "# Rows of the XIDs sheet at generation time; the tests hold the catalog to it.",
        "CATALOG_XID_ROW_COUNT = %d" % len(entries),
        "CATALOG_DECODE_ROW_COUNT = %d" % len(rules),
        "",
        "XID_CATALOG = {",
    ]
    for entry in entries:
        out.append("    %d: %s," % (entry["code"], render_call("XidCatalogEntry", entry, 4)))
    out += ["}", "", "NVLINK5_DECODE = ("]
    for rule in rules:
        out.append("    %s," % render_call("NvLink5DecodeRule", rule, 4))
    out += [")", "", "# Resolution buckets sheet: what each bucket asks the operator to do.", "GUIDANCE = {"]
    for bucket in sorted(guide):
        out.append("    %s: %s," % (literal(bucket, 4), literal(guide[bucket], 4)))
    out += ["}", ""]
    return "\n".join(out)


def read_input(data_dir: Path, name: str) -> bytes:
    """The CSV's bytes; ``<name>.gz`` when there is no ``<name>`` (the repo keeps NVIDIA's files
    gzipped, byte for byte: their CRLF line ends and curly quotes would fail ansible-test sanity)."""
    plain = data_dir / name
    if plain.exists() or not (data_dir / (name + ".gz")).exists():
        return plain.read_bytes()
    return gzip.decompress((data_dir / (name + ".gz")).read_bytes())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="directory with the four CSVs")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--catalog-version", help="override the content-derived version string")
    parser.add_argument("--check", action="store_true", help="exit 1 if the output file is not up to date")
    args = parser.parse_args(argv)
    try:
        text = render(args.data_dir, args.catalog_version)
    except (OSError, CatalogError, ValueError) as exc:
        print("gen_xid_catalog: %s" % exc, file=sys.stderr)
        return 2
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print("gen_xid_catalog: %s is stale; run tools/gen_xid_catalog.py" % args.output, file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    print("wrote %s (%d bytes)" % (args.output, len(text.encode())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
