# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The lab's fake InfiniBand sysfs tree, the writer side: what health.infiniband reads on a node
that has no HCA, so drills can take a link down, flap it, make it error or pull an HCA.

    <root>/class/infiniband/<hca>/ports/<n>/state        "4: ACTIVE"
                                            phys_state   "5: LinkUp"
                                            rate         "400 Gb/sec (4X NDR)"
                                            link_layer   "InfiniBand" or "Ethernet" (RoCE)
                                            counters/<name>   "0"
    <root>/class/infiniband/.lock           flock() serialises read-modify-write cycles

The files are in the kernel's format, so the reader cannot tell this tree from /sys. Every file is
written to a temporary name and renamed into place: a reader never sees a torn value.
Standard library only.
"""

from __future__ import annotations

import os
import re
import shutil
from contextlib import contextmanager
from typing import Iterator, List, Mapping, Sequence, Tuple, Union

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.fields import check_int
from ansible_collections.gpufleet.resilience.plugins.module_utils.files import flocked, replace_text
from ansible_collections.gpufleet.resilience.plugins.module_utils.ib_sysfs import (
    ACTIVE,
    CODED,
    COUNTERS,
    LINK_UP,
    PHYS_STATE_NAMES,
    RATE,
    STATE_NAMES,
)

MAX_PORTS = 64  # far beyond any HCA: a guard against a typo making thousands of directories
LINK_LAYERS = ("InfiniBand", "Ethernet")
_HCA = re.compile(r"[A-Za-z0-9_]+")
# What a cable pull looks like: the port logically DOWN, the PHY polling for a partner.
_DOWN = (1, 2)
_UP = (ACTIVE, LINK_UP)


def _ib_dir(root: str) -> str:
    return os.path.join(root, "class", "infiniband")


def _port_dir(root: str, hca: str, port: int) -> str:
    return os.path.join(_ib_dir(root), hca, "ports", str(port))


def _write(path: str, text: str) -> bool:
    # No fsync: the lab's tree needs to survive a torn read, not a host crash.
    return replace_text(path, text, sync=False)


def _read(path: str) -> str:
    with open(path, encoding="ascii") as handle:
        return handle.read().strip()


@contextmanager
def _locked(root: str, create: bool = False) -> Iterator[None]:
    base = _ib_dir(root)
    if create:
        os.makedirs(base, exist_ok=True)
    elif not os.path.isdir(base):
        raise FieldError("root", "%s has no fake IB tree (no class/infiniband); run create_tree" % root)
    with flocked(os.path.join(base, ".lock")):
        yield


# ---------------------------------------------------------------- checks


def _check_hca(hca: object, field: str = "hca") -> str:
    if not isinstance(hca, str) or not _HCA.fullmatch(hca):
        raise FieldError(field, "must be an HCA name of letters, digits and '_' (e.g. mlx5_0), got %r" % (hca,))
    return hca


def _existing_port(root: str, hca: object, port: object) -> str:
    path = _port_dir(root, _check_hca(hca), check_int(port, "port", minimum=1, maximum=MAX_PORTS))
    if not os.path.isdir(path):
        raise FieldError("port", "%s/%s does not exist in %s" % (hca, port, root))
    return path


def _code(value: Union[str, int], table: Mapping[int, str], field: str) -> int:
    """A code or a name of ``table``; names match without regard to case, spaces or '_'."""
    if isinstance(value, int) and not isinstance(value, bool) and value in table:
        return value
    if isinstance(value, str):
        wanted = re.sub(r"[\s_]", "", value).lower()
        for code, name in table.items():
            if wanted in (str(code), re.sub(r"[\s_]", "", name).lower()):
                return code
    raise FieldError(field, "must be one of %s (or its code), got %r" % (", ".join(table.values()), value))


def _check_rate(rate: Union[str, int, float]) -> str:
    text = "%g Gb/sec (4X)" % rate if isinstance(rate, (int, float)) and not isinstance(rate, bool) else rate
    if not isinstance(text, str) or not RATE.fullmatch(text.strip()):
        raise FieldError("rate", "must be like '400 Gb/sec (4X NDR)' or a number of Gb/s, got %r" % (rate,))
    return text.strip()


def _check_layer(link_layer: str) -> str:
    if link_layer not in LINK_LAYERS:
        raise FieldError("link_layer", "must be one of %s, got %r" % (", ".join(LINK_LAYERS), link_layer))
    return link_layer


def _is_up(port_dir: str) -> bool:
    return (_current_code(port_dir, "state"), _current_code(port_dir, "phys_state")) == _UP


def _write_states(port_dir: str, state: int, phys_state: int) -> bool:
    """Write the two states; going from up to not up counts in link_downed, as the kernel's does."""
    changed = False
    if _is_up(port_dir) and (state, phys_state) != _UP:
        _add(port_dir, "link_downed", 1)
        changed = True
    changed |= _write(os.path.join(port_dir, "state"), "%d: %s\n" % (state, STATE_NAMES[state]))
    return _write(os.path.join(port_dir, "phys_state"), "%d: %s\n" % (phys_state, PHYS_STATE_NAMES[phys_state])) \
        or changed


def _add(port_dir: str, counter: str, by: int) -> int:
    path = os.path.join(port_dir, "counters", counter)
    try:
        value = int(_read(path)) + by
    except (OSError, ValueError):
        value = by  # a counter removed or broken by a test starts again
    _write(path, "%d\n" % value)
    return value


# ---------------------------------------------------------------- API


def create_tree(root: str, hcas: Union[Mapping[str, int], Sequence[str]], ports_per_hca: int = 1,
                rate: Union[str, float] = "400 Gb/sec (4X NDR)", link_layer: str = "InfiniBand") -> bool:
    """Make the HCAs' ports, ACTIVE/LinkUp with zero counters; True when a file was written.

    ``hcas`` maps names to port counts, or lists names that get ``ports_per_hca`` each. An existing
    port keeps its state, rate and counters; only its missing files are written.
    """
    if isinstance(hcas, Mapping):
        wanted: List[Tuple[str, int]] = [(_check_hca(name, "hcas"), check_int(count, "hcas.%s" % name, 1, MAX_PORTS))
                                         for name, count in hcas.items()]
    elif isinstance(hcas, (list, tuple)):
        count = check_int(ports_per_hca, "ports_per_hca", 1, MAX_PORTS)
        wanted = [(_check_hca(name, "hcas[%d]" % index), count) for index, name in enumerate(hcas)]
    else:
        raise FieldError("hcas", "must be a dict of HCA name to port count or a list of names, got %r" % (hcas,))
    files = {"state": "%d: %s\n" % (ACTIVE, STATE_NAMES[ACTIVE]),
             "phys_state": "%d: %s\n" % (LINK_UP, PHYS_STATE_NAMES[LINK_UP]),
             "rate": _check_rate(rate) + "\n",
             "link_layer": _check_layer(link_layer) + "\n"}
    files.update((os.path.join("counters", name), "0\n") for name in COUNTERS)
    changed = False
    with _locked(root, create=True):
        for hca, ports in wanted:
            for port in range(1, ports + 1):
                port_dir = _port_dir(root, hca, port)
                os.makedirs(os.path.join(port_dir, "counters"), exist_ok=True)
                for name, text in files.items():
                    if not os.path.exists(os.path.join(port_dir, name)):
                        changed |= _write(os.path.join(port_dir, name), text)
    return changed


def set_port(root: str, hca: str, port: int, state: Union[str, int, None] = None,
             phys_state: Union[str, int, None] = None, rate: Union[str, float, None] = None) -> bool:
    """Set what is given ("DOWN" or 1, "Polling" or 2, "200 Gb/sec (4X HDR)"); True when a file changed."""
    codes = (None if state is None else _code(state, STATE_NAMES, "state"),
             None if phys_state is None else _code(phys_state, PHYS_STATE_NAMES, "phys_state"))
    rate_text = None if rate is None else _check_rate(rate)
    with _locked(root):
        port_dir = _existing_port(root, hca, port)
        changed = False
        if codes != (None, None):
            state_code = codes[0] if codes[0] is not None else _current_code(port_dir, "state")
            phys_code = codes[1] if codes[1] is not None else _current_code(port_dir, "phys_state")
            changed = _write_states(port_dir, state_code, phys_code)
        if rate_text is not None:
            changed |= _write(os.path.join(port_dir, "rate"), rate_text + "\n")
        return changed


def _current_code(port_dir: str, name: str) -> int:
    """The code in a state file; one missing or broken (by a test, on purpose) reads as down."""
    try:
        match = CODED.fullmatch(_read(os.path.join(port_dir, name)))
    except OSError:
        match = None
    if not match:
        return _DOWN[0] if name == "state" else _DOWN[1]
    return int(match.group(1))


def bump_counter(root: str, hca: str, port: int, counter: str, by: int = 1) -> int:
    """Add ``by`` to a counter; its new value."""
    if counter not in COUNTERS:
        raise FieldError("counter", "must be one of %s, got %r" % (", ".join(COUNTERS), counter))
    by = check_int(by, "by", minimum=0)
    with _locked(root):
        return _add(_existing_port(root, hca, port), counter, by)


def reset_counters(root: str, hca: str, port: int) -> bool:
    """Every counter back to 0, as a driver reload or ``perfquery -R`` does; True when one changed."""
    with _locked(root):
        port_dir = _existing_port(root, hca, port)
        changed = False
        for name in COUNTERS:
            changed |= _write(os.path.join(port_dir, "counters", name), "0\n")
        return changed


def flap(root: str, hca: str, port: int, times: int = 1) -> int:
    """Take the port down and up again ``times`` times (a port found down is brought up first);
    each flap adds one to link_downed. The new link_downed."""
    times = check_int(times, "times", minimum=1, maximum=10000)
    with _locked(root):
        port_dir = _existing_port(root, hca, port)
        _write_states(port_dir, *_UP)
        for _flap in range(times):
            _write_states(port_dir, *_DOWN)
            _write_states(port_dir, *_UP)
        return int(_read(os.path.join(port_dir, "counters", "link_downed")))


def remove_hca(root: str, hca: str) -> bool:
    """An HCA falling off the bus; True when it was there. create_tree brings it back, counters at 0."""
    _check_hca(hca)
    with _locked(root):
        path = os.path.join(_ib_dir(root), hca)
        if not os.path.isdir(path):
            return False
        # Renamed first (the reader skips dot names), so no reader sees half a tree being deleted.
        hidden = os.path.join(_ib_dir(root), ".%s.removed.%d" % (hca, os.getpid()))
        shutil.rmtree(hidden, ignore_errors=True)  # left by a removal that crashed
        os.rename(path, hidden)
        shutil.rmtree(hidden)
        return True


def clear(root: str) -> bool:
    """Every port of every HCA there back to ACTIVE/LinkUp (counters kept: they only ever grow, as
    on hardware); True when one changed. No tree: nothing to do."""
    if not os.path.isdir(_ib_dir(root)):
        return False
    with _locked(root):
        changed = False
        for hca in sorted(name for name in os.listdir(_ib_dir(root)) if not name.startswith(".")):
            ports_dir = os.path.join(_ib_dir(root), hca, "ports")
            for port in sorted(os.listdir(ports_dir)) if os.path.isdir(ports_dir) else []:
                changed |= _write_states(os.path.join(ports_dir, port), *_UP)
        return changed
