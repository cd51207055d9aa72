# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""XID number -> catalog entry as a plain dict (for the xid_info filter and reports)."""

from __future__ import annotations

from typing import Any, Dict

from ansible_collections.gpufleet.resilience.plugins.module_utils.health.model import HealthError
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_catalog import CATALOG_VERSION
from ansible_collections.gpufleet.resilience.plugins.module_utils.health.xid_rules import catalog_entry

# Matches the verdict engine's treatment of an unknown XID.
UNKNOWN_ACTION = "CONTACT_SUPPORT"


class XidLookupError(HealthError):
    """The value is not an XID number."""


def xid_info(value: Any) -> Dict[str, Any]:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
        raise XidLookupError("%r is not an XID number" % (value,))
    xid = int(str(value).strip())
    entry = catalog_entry(xid)
    if entry is None:
        return dict(xid=xid, name="UNKNOWN_XID", description="Not in the shipped XID catalog", severity="non-fatal",
                    action=UNKNOWN_ACTION, immediate_bucket="", investigatory_action="", applies_to=[],
                    unknown=True, catalog_version=CATALOG_VERSION)
    return dict(xid=xid, name=entry.name, description=entry.description, severity=entry.severity,
                action=entry.action, immediate_bucket=entry.immediate_bucket,
                investigatory_action=entry.investigatory_bucket, applies_to=list(entry.applies_to),
                unknown=False, catalog_version=CATALOG_VERSION)
