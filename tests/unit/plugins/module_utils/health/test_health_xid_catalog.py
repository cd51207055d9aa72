# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
from __future__ import annotations

import ast
import csv
import importlib.util
import re
from pathlib import Path

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.health import xid_catalog
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import (
    ACTIONS,
    OUT_OF_SERVICE_ACTIONS,
    SEVERITIES,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_catalog import (
    CATALOG_DECODE_ROW_COUNT,
    CATALOG_SHA256,
    CATALOG_SOURCE,
    CATALOG_VERSION,
    CATALOG_XID_ROW_COUNT,
    GUIDANCE,
    NVLINK5_DECODE,
    XID_CATALOG,
)

REPO = Path(__file__).resolve().parents[5]
HEALTH = REPO / "plugins" / "module_utils" / "health"
GENERATOR = REPO / "tools" / "gen_xid_catalog.py"
PURE_MODULES = ("model.py", "xid_catalog.py", "xid_rules.py", "kernel_log.py", "verdict.py")


def test_catalog_has_one_entry_per_xid_row_of_the_csv():
    assert CATALOG_XID_ROW_COUNT == 172
    assert len(XID_CATALOG) == CATALOG_XID_ROW_COUNT
    assert sorted(XID_CATALOG) == list(range(1, 173))
    for code, entry in XID_CATALOG.items():
        assert entry.code == code


def test_every_entry_has_a_known_action_and_a_consistent_severity():
    for entry in XID_CATALOG.values():
        assert entry.action in ACTIONS, entry
        assert entry.severity in SEVERITIES, entry
        # Out of service, or held for a human (CONTACT_SUPPORT fences the node): fatal.
        assert (entry.severity == "fatal") == (entry.action in OUT_OF_SERVICE_ACTIONS | {"CONTACT_SUPPORT"}), entry
        assert entry.name and entry.mnemonic.startswith(entry.name)
        assert set(entry.applies_to) <= {"A100", "H100", "B100", "GB200"}


@pytest.mark.parametrize(
    "xids, action",
    [
        ((79,), "RESTART_BM"),
        ((43, 63, 92), "IGNORE"),
        ((13, 31, 69, 94), "RESTART_APP"),
        ((48,), "RESET_GPU"),
        ((61,), "CONTACT_SUPPORT"),
        ((62, 64, 95, 109, 119, 120, 136, 140, 143, 155, 156, 158), "RESET_GPU"),
        ((74, 144, 145, 146, 147, 148, 149, 150), "DECODE"),
        ((151,), "RESTART_VM"),
        ((45,), "RESTART_FM"),
        ((154,), "CONTACT_SUPPORT"),  # only when its text cannot be read; xid_rules decodes it
        ((162, 172), "CONTACT_SUPPORT"),  # empty bucket in the catalog
    ],
)
def test_design_table_actions(xids, action):
    for xid in xids:
        assert XID_CATALOG[xid].action == action, xid


def test_catalog_keeps_nvidia_buckets_and_text():
    assert XID_CATALOG[45].immediate_bucket == "WORKFLOW_XID_45"
    assert XID_CATALOG[48].immediate_bucket == "WORKFLOW_XID_48"
    assert XID_CATALOG[154].immediate_bucket == "XID_154"
    assert XID_CATALOG[13].name == "ROBUST_CHANNEL_GR_EXCEPTION"
    assert "ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY" in XID_CATALOG[13].mnemonic
    assert XID_CATALOG[79].description == "GPU has fallen off the bus"
    assert "PCI Express" in XID_CATALOG[79].trigger_conditions
    assert XID_CATALOG[48].xid_154_linkage.startswith("CUDA 12.7")
    assert XID_CATALOG[1].unused and not XID_CATALOG[79].unused
    assert XID_CATALOG[121].applies_to == ("GB200",)
    assert "WORKFLOW_XID_45" in GUIDANCE and "RESTART_FM" in GUIDANCE["WORKFLOW_XID_45"]


def test_catalog_records_where_it_came_from():
    assert re.fullmatch(r"xid-1-172\+r\d{3}\+sha256:[0-9a-f]{12}", CATALOG_VERSION)
    assert "docs.nvidia.com" in CATALOG_SOURCE
    assert set(CATALOG_SHA256) == {"xid-catalog.csv", "xid-144-150-decode.csv", "xid-resolution-buckets.csv",
                                   "xid-catalog-columns.csv"}
    assert all(re.fullmatch(r"[0-9a-f]{64}", digest) for digest in CATALOG_SHA256.values())


def test_nvlink5_decode_table_is_complete():
    assert len(NVLINK5_DECODE) == CATALOG_DECODE_ROW_COUNT == 95
    assert {rule.xid for rule in NVLINK5_DECODE} == set(range(144, 151))
    for rule in NVLINK5_DECODE:
        assert rule.action in ("IGNORE", "RESET_GPU", "XID_154_EVAL")
        assert rule.action2 in ("", "RESET_GPU")
        assert rule.severity in SEVERITIES
        assert rule.v1_care and rule.v2_care
        assert rule.v1_value & ~rule.v1_care == 0 and rule.v2_value & ~rule.v2_care == 0
    promotable = [rule for rule in NVLINK5_DECODE if rule.action2]
    assert len(promotable) == 3 and all(rule.severity_raw == "Non-fatal*" for rule in promotable)


@pytest.mark.parametrize("name", PURE_MODULES)
def test_pure_modules_import_no_io(name):
    """The policy layer has no clients: stdlib helpers, the error base and its own package only."""
    allowed = {"__future__", "math", "re", "dataclasses", "typing", "datetime",
               "ansible_collections.gpufleet.resilience.plugins.module_utils.errors"}
    own = "ansible_collections.gpufleet.resilience.plugins.module_utils.health."
    tree = ast.parse((HEALTH / name).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("open", "exec", "eval", "__import__"):
            raise AssertionError("%s calls %s()" % (name, node.func.id))
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or ""]
        else:
            continue
        for module in modules:
            assert module in allowed or module.startswith(own), "%s imports %s" % (name, module)
            assert not module.startswith(own + "nvml"), name


@pytest.mark.parametrize("name", PURE_MODULES)
def test_pure_modules_are_ascii_and_carry_the_header(name):
    text = (HEALTH / name).read_text(encoding="utf-8")
    assert text.isascii(), name  # ansible-test no-smart-quotes; grep-friendly messages
    assert text.startswith("# Copyright: (c) 2026, gpufleet.resilience contributors\n# Apache License 2.0")
    assert "from __future__ import annotations" in text


# -------------------------------------------------------------- generator

def load_generator():
    spec = importlib.util.spec_from_file_location("gen_xid_catalog", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_csv(path: Path, rows) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)


MINI_CATALOG = [
    ["Type (XID)", "Code", "Mnemonic", "Description", "Applies to A100", "Applies to H100", "Applies to B100",
     "Applies to GB200", "Resolution Bucket (Immediate Action)", "Resolution Bucket (Investigatory Action)",
     "Xid 154 linkage", "Trigger Conditions"],
    ["XID", "79", "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "YES", "YES", "YES",
     "YES", "RESTART_BM", "CONTACT_SUPPORT", "CUDA 12.7; GPU driver R565", "PCI Express link \u2019down\u2019."],
    ["XID", "13", "ROBUST_CHANNEL_GR_EXCEPTION /\nROBUST_CHANNEL_GR_ERROR_SW_NOTIFY", "Graphics Engine Exception",
     "YES", "YES", "NO", "NO", "RESTART_APP", "WORKFLOW_XID_13", "", "x " * 200],
    ["XID", "45", "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup", "YES", "YES", "YES", "YES",
     "WORKFLOW_XID_45", "", "", ""],
    ["XID", "168", "REDUCED_GPU_MEMORY_CAPACITY", "Errors found in WPR", "YES", "YES", "YES", "YES", "", "", "", ""],
]
MINI_DECODE = [
    ["Xid", "Subcode", "V1", "V2", "Error Status (hex)", "Resolution Bucket (Data Center Recovery Action)",
     "A2 V1", "A2 V2", "Action 2", "Investigatory", "Severity", "HW/SW", "Local/Remote"],
    ["149", "NETIR_LINK_EVT/NETIR_LINK_DOWN", "------000100----------0111000110", "------000100-------------0010001",
     "", "RESET_GPU", "", "", "", "INVESTIGATE_LINK_SI", "Link Fatal", "HW", "Local: PacketLoss"],
]
MINI_BUCKETS = [["Guidance Class", "Resolution Action"], ["RESTART_BM", "Restart bare metal"]]


@pytest.fixture
def mini_data(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_csv(data / "xid-catalog.csv", MINI_CATALOG)
    write_csv(data / "xid-144-150-decode.csv", MINI_DECODE)
    write_csv(data / "xid-resolution-buckets.csv", MINI_BUCKETS)
    write_csv(data / "xid-catalog-columns.csv", [["Sheet Name", "Column Name", "Description"]])
    return data


def test_generator_is_deterministic_and_its_output_loads(mini_data, tmp_path):
    generator = load_generator()
    first, second = tmp_path / "a.py", tmp_path / "b.py"
    assert generator.main(["--data-dir", str(mini_data), "--output", str(first)]) == 0
    assert generator.main(["--data-dir", str(mini_data), "--output", str(second)]) == 0
    text = first.read_text(encoding="utf-8")
    assert text == second.read_text(encoding="utf-8")
    assert text.isascii()
    assert max(len(line) for line in text.splitlines()) <= 120
    namespace: dict = {}
    exec(compile(text, str(first), "exec"), namespace)
    catalog = namespace["XID_CATALOG"]
    assert sorted(catalog) == [13, 45, 79, 168]
    assert namespace["CATALOG_XID_ROW_COUNT"] == 4
    assert catalog[79].action == "RESTART_BM" and catalog[79].severity == "fatal"
    assert catalog[79].trigger_conditions == "PCI Express link 'down'."  # typographic quotes folded to ASCII
    assert catalog[13].name == "ROBUST_CHANNEL_GR_EXCEPTION" and catalog[13].applies_to == ("A100", "H100")
    assert catalog[13].trigger_conditions == ("x " * 200).strip()  # long text survives the line wrapping
    assert catalog[45].action == "RESTART_FM" and catalog[45].severity == "non-fatal"
    assert catalog[168].action == "CONTACT_SUPPORT"
    rule = namespace["NVLINK5_DECODE"][0]
    assert (rule.v1_care, rule.v1_value) == (0x03F003FF, 0x004001C6)
    assert (rule.v2_care, rule.v2_value) == (0x03F0007F, 0x00400011)
    assert rule.severity == "fatal" and rule.subcode_v2 == "NETIR_LINK_DOWN"


def test_generator_check_mode_detects_a_stale_module(mini_data, tmp_path):
    generator = load_generator()
    output = tmp_path / "catalog.py"
    assert generator.main(["--data-dir", str(mini_data), "--output", str(output)]) == 0
    assert generator.main(["--data-dir", str(mini_data), "--output", str(output), "--check"]) == 0
    output.write_text(output.read_text(encoding="utf-8") + "# edited by hand\n", encoding="utf-8")
    assert generator.main(["--data-dir", str(mini_data), "--output", str(output), "--check"]) == 1


def test_generator_refuses_an_unknown_bucket(mini_data, tmp_path):
    rows = [list(row) for row in MINI_CATALOG]
    rows[1][8] = "REPLACE_THE_DATACENTER"
    write_csv(mini_data / "xid-catalog.csv", rows)
    output = tmp_path / "catalog.py"
    assert load_generator().main(["--data-dir", str(mini_data), "--output", str(output)]) == 2
    assert not output.exists()


def test_committed_catalog_was_written_by_the_generator():
    text = (HEALTH / "xid_catalog.py").read_text(encoding="utf-8")
    assert "GENERATED by tools/gen_xid_catalog.py" in text
    generator = load_generator()
    combined = "".join(CATALOG_SHA256[name] for name in generator.INPUTS)
    assert xid_catalog.CATALOG_VERSION.endswith(generator.hashlib.sha256(combined.encode()).hexdigest()[:12])
