# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Exact file restore for the chaos families that edit a file (nccl_env, numa's kubelet config).

A file's state is a dict: ``existed``; when it did, ``size``, ``sha256``, ``mode``, ``uid``, ``gid``
and, with the content, ``content_b64`` (the bytes as base64). It goes to a sidecar file beside the
edited one *before* the edit, so a controller killed between the edit and the ledger's record of the
undo still leaves what the rollback needs. Writes are atomic (files.write_atomic): a reader sees
the old file or the new one, never a part.

The sidecar also holds ``written_sha256``, the digest of what the drill is about to write. The
rollback (``settle``) writes the pre-drill bytes back only over the drill's own bytes: a file that
someone changed during the drill is kept as it is, and the pre-drill bytes go beside it
(``<file>.gpufleet-pre-drill-<fault id>``), reported as a conflict for a person to settle. Nothing
anyone wrote is lost.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
from typing import Any, Dict, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.params import fault_id as check_fault_id
from ansible_collections.gpufleet.resilience.plugins.module_utils.files import write_atomic

SIDECAR = ".%s.gpufleet-chaos-%s"
PRE_DRILL = "%s.gpufleet-pre-drill-%s"


def sidecar_path(path: str, fault_id: Any) -> str:
    """The sidecar of ``path`` for one fault: a hidden file in the same directory."""
    return os.path.join(os.path.dirname(path), SIDECAR % (os.path.basename(path), check_fault_id(fault_id)))


def state(path: Optional[str], with_content: bool = False) -> Dict[str, Any]:
    try:
        with open(path, "rb") as handle:  # type: ignore[arg-type]
            content = handle.read()
            info = os.fstat(handle.fileno())
    except FileNotFoundError:
        return {"existed": False}
    found = {"existed": True, "size": len(content), "sha256": hashlib.sha256(content).hexdigest(),
             "mode": info.st_mode & 0o7777, "uid": info.st_uid, "gid": info.st_gid}
    if with_content:
        found["content_b64"] = base64.b64encode(content).decode()
    return found


def content(recorded: Mapping[str, Any]) -> Optional[bytes]:
    return base64.b64decode(recorded["content_b64"]) if recorded.get("existed") else None


def write_sidecar(sidecar: str, recorded: Mapping[str, Any]) -> None:
    write_atomic(sidecar, json.dumps(dict(recorded)).encode(), 0o600, None, None)


def read_sidecar(path: str) -> Optional[Dict[str, Any]]:
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read())
    except FileNotFoundError:
        return None


def restore(path: str, previous: Mapping[str, Any]) -> bool:
    """Put back the recorded state (its bytes, mode and owner, or its absence); True when the file's
    sha256 then matches the record (or the file is absent as it was)."""
    if previous.get("existed"):
        write_atomic(path, content(previous) or b"", previous["mode"], previous["uid"], previous["gid"])
        return state(path).get("sha256") == previous["sha256"]
    unlink(path)
    return True


def unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def settle(path: str, previous: Mapping[str, Any], written_sha256: Optional[str], fault_id: Any) -> Dict[str, Any]:
    """Undo the drill's edit of ``path`` without clobbering anyone else's.

    ``previous`` is the recorded pre-drill state, ``written_sha256`` the digest of what the drill
    wrote (None: unknown, an old sidecar). Returns ``{"action", "message", "kept"}`` with action
    ``already`` (the file is as before the drill), ``restored``, ``removed`` (absent before) or
    ``conflict`` (changed by someone else since: kept, the pre-drill bytes saved at ``kept``).
    """
    now = state(path)
    if now.get("sha256") == previous.get("sha256") or (not now["existed"] and not previous.get("existed")):
        return {"action": "already", "message": "%s is as it was before the drill" % path, "kept": None}
    if written_sha256 is not None and now.get("sha256") != written_sha256:
        kept = PRE_DRILL % (path, check_fault_id(fault_id))
        if previous.get("existed"):
            write_atomic(kept, content(previous) or b"", previous["mode"], previous["uid"], previous["gid"])
            saved = "its pre-drill bytes (sha256 %s) are in %s" % (str(previous.get("sha256"))[:12], kept)
        else:
            kept = None
            saved = "it did not exist before the drill"
        found = "was removed" if not now["existed"] else "now has sha256 %s" % now["sha256"][:12]
        return {"action": "conflict", "kept": kept,
                "message": "CONFLICT: %s changed during the drill, not by it (%s; the drill wrote %s): "
                           "kept as it is; %s" % (path, found, written_sha256[:12], saved)}
    if previous.get("existed"):
        same = restore(path, previous)
        return {"action": "restored", "kept": None, "message": "restored %s: %d bytes, sha256 %s%s" % (
            path, previous.get("size", 0), str(previous.get("sha256", ""))[:12],
            "" if same else " (MISMATCH after the write)")}
    unlink(path)
    return {"action": "removed", "kept": None, "message": "removed %s (absent before the drill)" % path}
