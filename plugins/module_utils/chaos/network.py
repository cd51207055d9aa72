# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The network family: ``net_degrade`` adds delay, loss and a rate limit to a fabric or IPoIB
interface's IP traffic, and observes the interface with eBPF while it lasts (ebpf.py).

What does what, so that a kernel without netem still runs the drill:

* rate  - ``tbf`` as the root qdisc (or netem's own ``rate`` when netem adds delay);
* loss  - an nftables table ``inet gpufleet_chaos_<tag>`` whose output-hook rule drops
  ``numgen random mod 1000 < loss*10`` of the packets leaving the interface, with a counter (the
  drops are the observation);
* delay - ``netem`` only. A kernel without it (this lab's) gets the rest of the drill; plan() lists
  the delay under ``not_injected`` and the report says so. No other qdisc delays packets.

Where: with ``params.interface`` the node's own interface (a real site; the drill's tasks run on the
node). Without it, in the lab only, the drill builds its own path: two network namespaces
``gpf-<fault id>-a``/``-b`` joined by a veth pair ``gpf<tag>a``/``gpf<tag>b`` (names <= 15 bytes), the
degradation on the ``a`` side, and it measures TCP throughput across it before and during the
fault. The lab never touches the machine's real interfaces.

Everything carries the fault's tag (a hash of the fault id), so revert and the kill switch remove
exactly their own objects; revert is idempotent and works from the spec alone after a crash
mid-inject. A root qdisc that is not the kernel's default is never replaced: inject refuses.

Pure: validation, names, command lines, the nft ruleset, the parsers. I/O: ``_run`` and the probes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos import ebpf, experiments
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.context import FaultContext
from ansible_collections.gpufleet.resilience.plugins.module_utils.chaos.params import fault_id as check_fault_id
from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError, GpufleetError

FAMILY = "network"
NET_DEGRADE = "net_degrade"
EXPERIMENTS = (NET_DEGRADE,)
PARAMS = experiments.get("net_degrade").knobs
DEFAULTS: Dict[str, Any] = {"observe": True, "measure_s": 1.5}
# Our root qdisc's handle: revert deletes a root qdisc only when it carries it.
HANDLE = "7a47:"
LAB_ADDR = ("10.213.0.1", "10.213.0.2")
LAB_PORT = 5201
COMMAND_TIMEOUT = 30
_IFNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,14}")
UNKNOWN_QDISC = "Specified qdisc kind is unknown"


# -- validation -------------------------------------------------------------------------------------
def _number(params: Mapping[str, Any], name: str, low: float, high: float, low_open: bool = False) -> Optional[float]:
    value = params.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value > high \
            or value < low or (low_open and value == low):
        raise FieldError("params.%s" % name, "must be a number %s %g and <= %g, not %r" % (
            ">" if low_open else ">=", low, high, value))
    return float(value)


def check_params(spec: Mapping[str, Any]) -> Dict[str, Any]:
    """The params with defaults, typed; FieldError("params.<name>") before anything changes."""
    if spec.get("experiment") not in EXPERIMENTS:
        runs = ", ".join(EXPERIMENTS)
        raise FieldError("experiment", "the network family runs %s, not %r" % (runs, spec.get("experiment")))
    given = dict(spec.get("params") or {})
    unknown = sorted(set(given) - set(PARAMS))
    if unknown:
        raise FieldError("params.%s" % unknown[0], "unknown for net_degrade; known: %s" % ", ".join(PARAMS))
    params = dict(DEFAULTS)
    params.update({k: v for k, v in given.items() if v is not None})
    params["delay_ms"] = _number(params, "delay_ms", 0, 60000)
    params["loss_percent"] = _number(params, "loss_percent", 0, 100)
    params["rate_mbit"] = _number(params, "rate_mbit", 0, 400000, low_open=True)
    params["measure_s"] = _number(params, "measure_s", 0, 60, low_open=True)
    if not isinstance(params["observe"], bool):
        raise FieldError("params.observe", "must be true or false, not %r" % (params["observe"],))
    if not (params["delay_ms"] or params["loss_percent"] or params["rate_mbit"]):
        raise FieldError("params.delay_ms", "net_degrade needs delay_ms, loss_percent or rate_mbit (> 0)")
    interface = params.get("interface")
    if interface is not None and (not isinstance(interface, str) or not _IFNAME.fullmatch(interface)):
        raise FieldError("params.interface", "must be an interface name (at most 15 characters), not %r"
                         % (interface,))
    if interface is None and not spec.get("lab_dir"):
        raise FieldError("params.interface", "name the node's fabric or IPoIB interface (e.g. ib0); only the lab "
                                             "builds its own veth path")
    return params


def fault_id(spec: Mapping[str, Any]) -> str:
    return check_fault_id(spec.get("fault_id"))


# -- names and command lines -----------------------------------------------------------------------
def names(fault: str) -> Dict[str, str]:
    """Every object's name, from the fault id alone (revert after a crash needs no undo)."""
    tag = hashlib.sha1(fault.encode()).hexdigest()[:8]
    return {"tag": tag, "ns_a": "gpf-%s-a" % fault, "ns_b": "gpf-%s-b" % fault, "veth_a": "gpf%sa" % tag,
            "veth_b": "gpf%sb" % tag, "table": "gpufleet_chaos_%s" % tag}


def in_ns(ns: Optional[str], argv: List[str]) -> List[str]:
    return (["ip", "netns", "exec", ns, *argv]) if ns else argv


def qdisc_argv(dev: str, params: Mapping[str, Any], netem: bool) -> Optional[List[str]]:
    """The root qdisc for delay and rate, or None when there is nothing a qdisc can do here."""
    head = ["tc", "qdisc", "add", "dev", dev, "root", "handle", HANDLE]
    delay, rate = params.get("delay_ms"), params.get("rate_mbit")
    if netem and delay:
        argv = [*head, "netem", "delay", "%gms" % delay]
        return argv + (["rate", "%gmbit" % rate] if rate else [])
    if rate:
        # burst: at least one 64 KiB GSO frame plus 10 ms at the rate, or tbf drops big frames outright.
        burst = max(65536 + 1514, int(rate * 1e6 / 8 / 100))
        return [*head, "tbf", "rate", "%gmbit" % rate, "burst", str(burst), "latency", "100ms"]
    return None


def nft_ruleset(table: str, dev: str, loss_percent: float) -> str:
    """``nft -f -`` input: drop ``loss_percent`` of what leaves ``dev``, counted."""
    per_mille = round(loss_percent * 10)
    return ("table inet %s {\n  chain egress {\n    type filter hook output priority 0; policy accept;\n"
            "    oifname \"%s\" numgen random mod 1000 < %d counter drop comment \"gpufleet chaos\"\n  }\n}\n"
            % (table, dev, per_mille))


def parse_nft_counter(text: str) -> Dict[str, int]:
    """``nft -j list table`` -> the drop rule's counter {"packets", "bytes"} (zeros when absent)."""
    try:
        items = json.loads(text or "{}").get("nftables") or []
    except ValueError:
        return {"packets": 0, "bytes": 0}
    for item in items:
        for expr in (item.get("rule") or {}).get("expr") or []:
            if isinstance(expr, dict) and "counter" in expr:
                counter = expr["counter"]
                return {"packets": int(counter.get("packets", 0)), "bytes": int(counter.get("bytes", 0))}
    return {"packets": 0, "bytes": 0}


def root_qdisc(text: str) -> Optional[Dict[str, Any]]:
    """``tc -j qdisc show dev X`` -> the root qdisc, or None."""
    try:
        found = json.loads(text or "[]")
    except ValueError:
        return None
    return next((q for q in found if q.get("root")), None)


def default_root(qdisc: Optional[Mapping[str, Any]]) -> bool:
    """A kernel-assigned root qdisc (handle 0:, e.g. noqueue, mq, pfifo_fast): ours to replace and
    to give back by deleting ours. A handle someone chose means someone configured it."""
    return qdisc is None or str(qdisc.get("handle", "0:")) == "0:"


def unknown_kind(stderr: str) -> bool:
    return UNKNOWN_QDISC.lower() in (stderr or "").lower()


def mbit(nbytes: int, seconds: float) -> float:
    return round(nbytes * 8 / 1e6 / seconds, 3) if seconds > 0 else 0.0


# -- capabilities ----------------------------------------------------------------------------------
_capabilities: Dict[str, Any] = {}


def capabilities() -> Dict[str, Any]:
    """{"root", "tc", "nft", "netem", "tbf", "ebpf_missing"}: probed once per process, in a throwaway
    network namespace (adding a qdisc is the only reliable test: modules load on demand)."""
    if _capabilities:
        return _capabilities
    found: Dict[str, Any] = {"root": os.geteuid() == 0, "tc": bool(shutil.which("tc")),
                             "nft": bool(shutil.which("nft")), "ip": bool(shutil.which("ip"))}
    found["netem"] = found["tbf"] = False
    if found["root"] and found["tc"] and found["ip"]:
        probe = "gpf-probe-%d" % os.getpid()
        if _try(["ip", "netns", "add", probe]) == "":
            try:
                tbf = ["tbf", "rate", "1mbit", "burst", "32kbit", "latency", "50ms"]
                for kind, argv in (("netem", ["netem", "delay", "1ms"]), ("tbf", tbf)):
                    err = _try(["tc", "-n", probe, "qdisc", "add", "dev", "lo", "root", *argv])
                    found[kind] = err == ""
                    _try(["tc", "-n", probe, "qdisc", "del", "dev", "lo", "root"])
            finally:
                _try(["ip", "netns", "del", probe])
    _capabilities.update(found)
    return _capabilities


def _try(argv: List[str]) -> str:
    """'' on success, else the error text."""
    try:
        _run(argv)
        return ""
    except GpufleetError as exc:
        return str(exc) or "failed"


# -- plan ------------------------------------------------------------------------------------------
def shortfalls(params: Mapping[str, Any], caps: Mapping[str, Any]) -> Dict[str, List[str]]:
    """What cannot be done here: ``missing`` stops the drill (nothing could be injected),
    ``not_injected`` is one knob the drill runs without."""
    missing: List[str] = []
    partial: List[str] = []
    if not caps.get("root"):
        missing.append("root: tc, nft and network namespaces need CAP_NET_ADMIN")
    if not caps.get("ip"):
        missing.append("iproute2: the ip command is not installed")
    if params.get("delay_ms") and not caps.get("netem"):
        partial.append("delay_ms=%g: needs the netem qdisc, which this kernel lacks (%s): not injected"
                       % (params["delay_ms"], UNKNOWN_QDISC))
    if params.get("rate_mbit") and not (caps.get("tbf") or caps.get("netem")):
        partial.append("rate_mbit=%g: needs the tbf (or netem) qdisc, missing here: not injected" % params["rate_mbit"])
    if params.get("loss_percent") and not caps.get("nft"):
        partial.append("loss_percent=%g: needs nftables (the nft command), missing here: not injected"
                       % params["loss_percent"])
    if params.get("observe"):
        why = ebpf.missing()
        if why:
            partial.append("eBPF observation: %s: not observed" % why)
    wanted = [k for k in ("delay_ms", "rate_mbit", "loss_percent") if params.get(k)]
    if wanted and all(any(p.startswith("%s=" % k) for p in partial) for k in wanted):
        missing.append("net_degrade: nothing asked for can be injected here (%s)" % ", ".join(wanted))
    return {"missing": missing, "not_injected": partial}


def plan(spec: Mapping[str, Any]) -> Dict[str, Any]:
    """What inject would do and what this kernel cannot. Changes nothing (the probes use a
    throwaway namespace)."""
    params = check_params(spec)
    node = spec.get("node") or "-"
    fault = str(spec.get("fault_id") or "<fault id>")
    name = names(fault)
    caps = capabilities()
    gaps = shortfalls(params, caps)
    actions: List[str] = []
    if params.get("interface"):
        dev, ns = params["interface"], None
    else:
        dev, ns = name["veth_a"], name["ns_a"]
        actions.append("%s: ip netns add %s and %s, a veth pair %s/%s between them (%s <-> %s)" % (
            node, name["ns_a"], name["ns_b"], name["veth_a"], name["veth_b"], LAB_ADDR[0], LAB_ADDR[1]))
    where = "%s%s" % (dev, " in netns %s" % ns if ns else "")
    qdisc = qdisc_argv(dev, params, bool(caps.get("netem")))
    if qdisc and (caps.get("tbf") or caps.get("netem")):
        actions.append("%s: %s (%s)" % (node, " ".join(qdisc), where))
    if params.get("loss_percent") and caps.get("nft"):
        actions.append("%s: nft table inet %s: drop %g%% of the packets leaving %s, counted" % (
            node, name["table"], params["loss_percent"], where))
    if not params.get("interface"):
        actions.append("%s: measure TCP throughput %s -> %s for %gs before and during the fault" % (
            node, LAB_ADDR[0], LAB_ADDR[1], params["measure_s"]))
    if params.get("observe"):
        actions.append("%s: bpftrace on tracepoint:net:net_dev_xmit and net:netif_receive_skb, counting %s's "
                       "packets and bytes until the rollback" % (node, dev))
    actions.append("%s: rollback: stop the observer by PID, delete the nft table and our root qdisc (handle %s)%s" % (
        node, HANDLE, ", delete both namespaces" if not params.get("interface") else ""))
    # The lab's simulated fabric is the experiment's own note (experiments.py).
    return {"actions": actions, "simulated": [], "missing": gaps["missing"],
            "not_injected": gaps["not_injected"]}


# -- inject ----------------------------------------------------------------------------------------
def inject(spec: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    params = check_params(spec)
    fault = fault_id(spec)
    name = names(fault)
    caps = capabilities()
    gaps = shortfalls(params, caps)
    lab = not params.get("interface")
    dev, ns = (name["veth_a"], name["ns_a"]) if lab else (params["interface"], None)
    undo: Dict[str, Any] = {"experiment": NET_DEGRADE, "lab": lab, "dev": dev, "netns": ns, "names": name,
                            "not_injected": gaps["not_injected"], "applied": []}
    if gaps["missing"]:
        raise GpufleetError("missing capability: %s" % "; ".join(gaps["missing"]))
    if not lab:
        _check_interface(dev)
    if ctx.check_mode:
        undo["check_mode"] = True
        return undo
    try:
        if lab:
            _build_path(name)
            undo["applied"].append("netns %s, %s; veth %s/%s" % (
                name["ns_a"], name["ns_b"], name["veth_a"], name["veth_b"]))
            undo["measured"] = {"before_mbit": _measure(name, params["measure_s"])}
        qdisc = qdisc_argv(dev, params, bool(caps.get("netem")))
        if qdisc and (caps.get("tbf") or caps.get("netem")):
            _run(in_ns(ns, qdisc))
            undo["qdisc"] = HANDLE
            undo["applied"].append(" ".join(qdisc))
        if params.get("loss_percent") and caps.get("nft"):
            _run(in_ns(ns, ["nft", "-f", "-"]), stdin=nft_ruleset(name["table"], dev, params["loss_percent"]))
            undo["table"] = name["table"]
            undo["applied"].append("nft table inet %s (drop %g%%)" % (name["table"], params["loss_percent"]))
        if params.get("observe"):
            observer = ebpf.start(name["tag"], dev)
            if observer.get("missing"):
                undo["not_injected"].append("eBPF observation: %s: not observed" % observer["missing"])
            else:
                undo["observer"] = observer
        if lab:
            undo["measured"]["during_mbit"] = _measure(name, params["measure_s"])
    except BaseException:
        revert(dict(spec, **undo), ctx)
        raise
    return undo


def _check_interface(dev: str) -> None:
    try:
        _run(["ip", "link", "show", "dev", dev])
    except GpufleetError:
        raise FieldError("params.interface", "this node has no interface %r" % dev) from None
    if not default_root(root_qdisc(_run(["tc", "-j", "qdisc", "show", "dev", dev]))):
        raise GpufleetError("%s already has a configured root qdisc; the drill does not replace it "
                            "(tc qdisc show dev %s)" % (dev, dev))


def _build_path(name: Mapping[str, str]) -> None:
    for ns in (name["ns_a"], name["ns_b"]):
        _run(["ip", "netns", "add", ns])
    _run(["ip", "link", "add", name["veth_a"], "netns", name["ns_a"], "type", "veth", "peer", "name", name["veth_b"],
          "netns", name["ns_b"]])
    for ns, dev, addr in ((name["ns_a"], name["veth_a"], LAB_ADDR[0]), (name["ns_b"], name["veth_b"], LAB_ADDR[1])):
        _run(["ip", "-n", ns, "addr", "add", "%s/30" % addr, "dev", dev])
        _run(["ip", "-n", ns, "link", "set", dev, "up"])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])


# A receiver and a sender, each in its namespace: the throughput is what the receiver got per second.
_RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); s.settimeout(30)
print("ready", flush=True)
c, _ = s.accept(); n = 0; t0 = None
while True:
    b = c.recv(1 << 16)
    if not b: break
    t0 = t0 or time.monotonic(); n += len(b)
print(n, time.monotonic() - (t0 or time.monotonic()), flush=True)
"""
_SENDER = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
end = time.monotonic() + float(sys.argv[3]); buf = b"x" * 65536
while time.monotonic() < end: s.sendall(buf)
s.close()
"""


def _measure(name: Mapping[str, str], seconds: float) -> float:
    receiver = subprocess.Popen(in_ns(name["ns_b"], [sys.executable, "-c", _RECEIVER, LAB_ADDR[1], str(LAB_PORT)]),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if (receiver.stdout.readline() or "").strip() != "ready":
            raise GpufleetError("the lab's throughput receiver did not start: %s" % receiver.stderr.read())
        _run(in_ns(name["ns_a"], [sys.executable, "-c", _SENDER, LAB_ADDR[1], str(LAB_PORT), str(seconds)]))
        out, err = receiver.communicate(timeout=COMMAND_TIMEOUT)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    words = out.split()
    if len(words) != 2:
        raise GpufleetError("the lab's throughput receiver printed %r: %s" % (out, err))
    return mbit(int(words[0]), float(words[1]))


# -- revert ----------------------------------------------------------------------------------------
def revert(undo: Mapping[str, Any], ctx: FaultContext) -> Dict[str, Any]:
    """Idempotent; works from the spec alone (names derive from the fault id). Returns
    {"reverted": [...], "already": bool, "observed": {...}}."""
    if ctx.check_mode:
        return {"reverted": [], "already": False, "check_mode": True}
    name = dict(undo.get("names") or names(fault_id(undo)))
    params = dict(undo.get("params") or {})
    lab = undo.get("lab", not params.get("interface"))
    dev = undo.get("dev") or (name["veth_a"] if lab else params.get("interface"))
    ns = name["ns_a"] if lab else None
    done: List[str] = []
    observed: Dict[str, Any] = {"interface": dev, "not_injected": list(undo.get("not_injected") or [])}
    if undo.get("measured"):
        observed["throughput_mbit"] = dict(undo["measured"])
    observer = undo.get("observer") or ebpf.find_orphan(name["tag"])
    if observer:
        stopped = ebpf.stop(observer)
        if stopped.get("counts") is not None:
            observed["ebpf"] = stopped["counts"]
        if stopped.get("stopped"):
            done.append("stopped the bpftrace observer (pid %s)" % stopped.get("pid"))
    netns = set(_run(["ip", "netns", "list"]).split()) if shutil.which("ip") else set()
    here = (not lab) or name["ns_a"] in netns
    if here and shutil.which("nft"):
        listing = _try_out(in_ns(ns, ["nft", "-j", "list", "table", "inet", name["table"]]))
        if listing is not None:
            observed["nft_dropped"] = parse_nft_counter(listing)
            _run(in_ns(ns, ["nft", "delete", "table", "inet", name["table"]]))
            done.append("nft delete table inet %s" % name["table"])
    if here and dev:
        root = root_qdisc(_try_out(in_ns(ns, ["tc", "-j", "qdisc", "show", "dev", dev])) or "")
        if root and str(root.get("handle")) == HANDLE:
            _run(in_ns(ns, ["tc", "qdisc", "del", "dev", dev, "root"]))
            done.append("tc qdisc del dev %s root (%s)" % (dev, root.get("kind")))
    if lab:
        for space in (name["ns_a"], name["ns_b"]):
            if space in netns:
                # Deleting a namespace deletes its veth end, and so the pair, and everything in it.
                _run(["ip", "netns", "del", space])
                done.append("ip netns del %s" % space)
    return {"reverted": done, "already": not done, "observed": observed}


def _try_out(argv: List[str]) -> Optional[str]:
    try:
        return _run(argv)
    except GpufleetError:
        return None


def _run(argv: List[str], stdin: Optional[str] = None) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False,
                              input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GpufleetError("%s: %s" % (" ".join(argv), exc)) from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip() or "no output"
        raise GpufleetError("%s failed (rc %d): %s" % (" ".join(argv), done.returncode, said))
    return done.stdout
