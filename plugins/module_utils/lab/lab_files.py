# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Many files and directories of the lab in one module run: each is looked at, and only what
differs (missing, other content, mode, owner or group) is written.

A module run per file (``ansible.builtin.file`` or ``copy`` with a loop) costs a Python start per
item; the lab's roles have a few hundred of them. ``plan`` says what each entry needs (nothing for
one already as wanted), ``apply`` does it; the module runs ``plan`` alone in check mode.

Pure but for the file system; no imports of ours but the error base.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError
from ansible_collections.gpufleet.resilience.plugins.module_utils.files import read_or_none

STATES = ("file", "directory", "absent")
KEYS = ("path", "state", "content", "mode", "owner", "group", "force", "validate", "diff", "owned_by_runner")


class LabFilesError(GpufleetError):
    """A file could not be written, or its new content failed validation."""


@dataclass(frozen=True)
class FileSpec:
    """One wanted path. ``force=False`` leaves the content of an existing file alone (mode and owner
    are still set); ``validate`` is a command with ``%s`` run on new content before it replaces the file;
    ``diff=False`` keeps the content out of the diff (a secret); ``owned_by_runner``: when the path exists,
    it must be no symlink and belong to the user running this, or nothing of the list is written."""

    path: str
    state: str = "file"
    content: Optional[str] = None
    mode: Optional[int] = None
    uid: Optional[int] = None
    gid: Optional[int] = None
    force: bool = True
    validate: Optional[str] = None
    diff: bool = True
    owned_by_runner: bool = False


def _mode(value: Any, field: str) -> Optional[int]:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise FieldError(field, "must be an octal string such as '0644', not %r" % (value,))
    if isinstance(value, int):
        # YAML 0644 without quotes is the integer 420: take it as the number it is.
        number = value
    else:
        text = str(value).strip()
        try:
            number = int(text, 8)
        except ValueError:
            raise FieldError(field, "must be an octal string such as '0644', not %r" % (value,)) from None
    if not 0 <= number <= 0o7777:
        raise FieldError(field, "%r is not a file mode (0 to 07777)" % (value,))
    return number


def _uid(value: Any, field: str) -> Optional[int]:
    if value is None or value == "":
        return None
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    try:
        return pwd.getpwnam(str(value)).pw_uid
    except KeyError:
        raise FieldError(field, "no such user %r" % (value,)) from None


def _gid(value: Any, field: str) -> Optional[int]:
    if value is None or value == "":
        return None
    if isinstance(value, int) or str(value).isdigit():
        return int(value)
    try:
        return grp.getgrnam(str(value)).gr_gid
    except KeyError:
        raise FieldError(field, "no such group %r" % (value,)) from None


def parse(entries: Sequence[Any], field: str = "files") -> List[FileSpec]:
    """The entries as FileSpecs; a FieldError names the bad one (``files[3].mode``)."""
    if not isinstance(entries, (list, tuple)):
        raise FieldError(field, "must be a list of {path, state, content, mode, owner, group}")
    specs: List[FileSpec] = []
    seen: Dict[str, int] = {}
    for index, entry in enumerate(entries):
        where = "%s[%d]" % (field, index)
        if not isinstance(entry, Mapping):
            raise FieldError(where, "must be a mapping with a path, not %r" % (entry,))
        unknown = sorted(set(entry) - set(KEYS))
        if unknown:
            raise FieldError("%s.%s" % (where, unknown[0]), "unknown key (known: %s)" % ", ".join(KEYS))
        path = entry.get("path")
        if not isinstance(path, str) or not path or not os.path.isabs(path):
            raise FieldError(where + ".path", "must be an absolute path, not %r" % (path,))
        path = os.path.normpath(path)
        state = entry.get("state") or ("file" if entry.get("content") is not None else "directory")
        if state not in STATES:
            raise FieldError(where + ".state", "must be one of %s, not %r" % (", ".join(STATES), state))
        content = entry.get("content")
        if state == "file" and content is None:
            raise FieldError(where + ".content", "is required with state file")
        if state != "file" and content is not None:
            raise FieldError(where + ".content", "is only for state file")
        if content is not None and not isinstance(content, str):
            raise FieldError(where + ".content", "must be a string")
        validate = entry.get("validate") or None
        if validate is not None and (state != "file" or "%s" not in str(validate)):
            raise FieldError(where + ".validate", "must be a command with %s, for state file only")
        if path in seen:
            raise FieldError(where + ".path", "%s is also %s[%d]" % (path, field, seen[path]))
        seen[path] = index
        flags = {}
        for key, default in (("force", True), ("diff", True), ("owned_by_runner", False)):
            flags[key] = entry.get(key, default)
            if not isinstance(flags[key], bool):
                raise FieldError("%s.%s" % (where, key), "must be true or false")
        specs.append(FileSpec(
            path=path, state=state, content=content, mode=_mode(entry.get("mode"), where + ".mode"),
            uid=_uid(entry.get("owner"), where + ".owner"), gid=_gid(entry.get("group"), where + ".group"),
            validate=validate, **flags))
    return specs


def refuse_foreign(specs: Sequence[FileSpec]) -> None:
    """LabFilesError naming the first ``owned_by_runner`` path that exists and is a symlink or belongs to
    another user. A lab directory in /var/tmp, where anyone may create it first, would otherwise keep its
    maker as owner, who could then swap the lab's certificates, binaries or PID records."""
    runner = os.geteuid()
    for spec in specs:
        if not spec.owned_by_runner:
            continue
        try:
            found = os.lstat(spec.path)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(found.st_mode):
            raise LabFilesError("%s is a symlink (to %s), not a %s of our own: remove it (after checking who made "
                                "it and why)" % (spec.path, os.readlink(spec.path), spec.state))
        if found.st_uid != runner:
            raise LabFilesError("%s already exists and is owned by uid %d, not by uid %d that runs this: remove it "
                                "(after checking who made it and why)" % (spec.path, found.st_uid, runner))


def plan(spec: FileSpec) -> List[str]:
    """What ``spec`` needs: [] when the path is as wanted, else some of ``create``, ``content``,
    ``mode``, ``owner``, ``group``, ``remove``. Raises LabFilesError when another kind of file is there."""
    try:
        found = os.lstat(spec.path)
    except FileNotFoundError:
        return [] if spec.state == "absent" else ["create"]
    if spec.state == "absent":
        return ["remove"]
    wanted_type = stat.S_ISDIR if spec.state == "directory" else stat.S_ISREG
    if not wanted_type(found.st_mode):
        raise LabFilesError("%s: is a %s, not a %s; remove it after checking what it is"
                            % (spec.path, _kind(found.st_mode), "directory" if spec.state == "directory" else
                               "regular file"))
    needs = []
    if spec.state == "file" and spec.force and read_or_none(spec.path) != spec.content.encode("utf-8"):
        needs.append("content")
    if spec.mode is not None and stat.S_IMODE(found.st_mode) != spec.mode:
        needs.append("mode")
    if spec.uid is not None and found.st_uid != spec.uid:
        needs.append("owner")
    if spec.gid is not None and found.st_gid != spec.gid:
        needs.append("group")
    return needs


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISREG(mode):
        return "regular file"
    return "special file"


def before_text(spec: FileSpec) -> str:
    """The current content, for a diff ('' when missing or not a file we write)."""
    if spec.state != "file":
        return ""
    data = read_or_none(spec.path)
    return "" if data is None else data.decode("utf-8", errors="replace")


Validator = Callable[[str, str], None]


def apply(spec: FileSpec, needs: Sequence[str], validate: Optional[Validator] = None) -> None:
    """Do what ``plan`` found. ``validate(command, path)`` runs ``spec.validate`` on the new content
    (a temporary file beside the target) and raises LabFilesError when it refuses it."""
    if not needs:
        return
    try:
        if "remove" in needs:
            if os.path.isdir(spec.path) and not os.path.islink(spec.path):
                os.rmdir(spec.path)
            else:
                os.unlink(spec.path)
            return
        if spec.state == "directory":
            if "create" in needs:
                os.makedirs(spec.path, exist_ok=True)
            _attributes(spec.path, spec)
            return
        if "create" in needs or "content" in needs:
            _write(spec, validate)
        else:
            _attributes(spec.path, spec)
    except OSError as exc:
        raise LabFilesError("%s: %s" % (spec.path, exc.strerror or exc)) from exc


def _attributes(path: str, spec: FileSpec) -> None:
    if spec.uid is not None or spec.gid is not None:
        os.chown(path, -1 if spec.uid is None else spec.uid, -1 if spec.gid is None else spec.gid)
    if spec.mode is not None:
        os.chmod(path, spec.mode)


def _write(spec: FileSpec, validate: Optional[Validator]) -> None:
    directory = os.path.dirname(spec.path)
    os.makedirs(directory, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(spec.path), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(spec.content.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        if spec.mode is not None:
            os.chmod(temp, spec.mode)
        else:
            # A new file gets the umask's mode (as copy does); a rewritten one keeps its own.
            try:
                os.chmod(temp, stat.S_IMODE(os.stat(spec.path).st_mode))
            except FileNotFoundError:
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(temp, 0o666 & ~umask)
        if spec.uid is not None or spec.gid is not None:
            os.chown(temp, -1 if spec.uid is None else spec.uid, -1 if spec.gid is None else spec.gid)
        if spec.validate and validate is not None:
            validate(spec.validate, temp)
        os.replace(temp, spec.path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def ensure(specs: Sequence[FileSpec], check_mode: bool, validate: Optional[Validator] = None) -> List[Dict[str, Any]]:
    """Each spec brought to what it wants, in order (a directory before the files in it). One entry
    per path that needed something: {path, state, needs, before, after} (before/after: content, for
    a diff, left out with ``diff=False``). Nothing is written in check mode, nor when an ``owned_by_runner``
    path belongs to someone else."""
    refuse_foreign(specs)
    changes: List[Dict[str, Any]] = []
    for spec in specs:
        needs = plan(spec)
        if not needs:
            continue
        change: Dict[str, Any] = {"path": spec.path, "state": spec.state, "needs": list(needs)}
        if spec.state == "file" and spec.diff and ("create" in needs or "content" in needs):
            change["before"] = before_text(spec)
            change["after"] = spec.content
        changes.append(change)
        if not check_mode:
            apply(spec, needs, validate)
    return changes
