# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""Replace a node through Cluster API: delete the Machine that owns it, wait for a new Ready Node.

Cluster API keeps a MachineDeployment's (or MachineSet's) replica count: a deleted Machine is
replaced by a new one, whose infrastructure provider boots a machine that joins as a new Node.
So a node is replaced by deleting its Machine, never its Node.

* **Which Machine.** The Node's annotations ``cluster.x-k8s.io/machine`` and
  ``cluster.x-k8s.io/cluster-namespace`` (set by Cluster API once the Node joined), else the
  Machine whose ``status.nodeRef.name`` is the node. A Machine owned by no MachineSet (no
  ``cluster.x-k8s.io/deployment-name`` or ``set-name`` label) is refused: deleting it would bring
  nothing back.
* **Which Node is new.** One whose Machine is in the same MachineDeployment (else MachineSet), is
  not the deleted Machine, did not exist when the Machine was deleted, and is Ready. It gets the
  annotations ``gpufleet.io/replaces=<old node>`` (and the remediation id), so a rerun finds it.
* **Resumable.** Before the delete, the old Node gets ``gpufleet.io/replace-machine``: the
  Machine, its group and the time. A rerun after a crash that finds the Machine gone waits on
  that record (new Machines are those created since).
* **API version.** The group's preferred version (``v1beta1`` up to Cluster API 1.10,
  ``v1beta2`` from 1.11); the fields used here are the same in both.

The flow's decisions are pure functions of dicts (``machine_of_node``, ``owning_group``,
``new_machines``); ``ClusterApiNodes`` does the I/O.
"""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.resilience.plugins.module_utils.errors import FieldError
from ansible_collections.gpufleet.resilience.plugins.module_utils.kube.client import (
    ApiException,
    Connection,
    KubeError,
    api_error,
    core_v1,
)
from ansible_collections.gpufleet.resilience.plugins.module_utils.rfc3339 import parse as parse_rfc3339

try:
    from kubernetes import client as k8s_client
except ImportError:  # pragma: no cover - core_v1() reports the missing package
    k8s_client = None

GROUP = "cluster.x-k8s.io"
MACHINES = "machines"
MACHINE_ANNOTATION = "cluster.x-k8s.io/machine"
CLUSTER_NAMESPACE_ANNOTATION = "cluster.x-k8s.io/cluster-namespace"
CLUSTER_NAME_ANNOTATION = "cluster.x-k8s.io/cluster-name"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
# Labels Cluster API puts on a Machine: its MachineDeployment, its MachineSet.
GROUP_LABELS = ("cluster.x-k8s.io/deployment-name", "cluster.x-k8s.io/set-name")
GROUP_KINDS = {"cluster.x-k8s.io/deployment-name": "MachineDeployment", "cluster.x-k8s.io/set-name": "MachineSet"}
REPLACES_ANNOTATION = "gpufleet.io/replaces"
REMEDIATION_ID_ANNOTATION = "gpufleet.io/remediation-id"
RECORD_ANNOTATION = "gpufleet.io/replace-machine"
MERGE_PATCH = "application/merge-patch+json"


class ClusterApiError(KubeError):
    """Cluster API refused, is missing, or no replacement came."""


# ---------------------------------------------------------------- pure decisions


def meta(obj: Optional[Mapping[str, Any]]) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def node_ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def machine_of_node(node: Mapping[str, Any], machines: Sequence[Mapping[str, Any]]) -> Optional[Mapping[str, Any]]:
    """The Machine of ``node``: named by its annotations, else the one whose nodeRef is the node."""
    annotations = meta(node).get("annotations") or {}
    name = meta(node).get("name")
    wanted = annotations.get(MACHINE_ANNOTATION)
    namespace = annotations.get(CLUSTER_NAMESPACE_ANNOTATION)
    if wanted:
        for machine in machines:
            if meta(machine).get("name") == wanted and (not namespace or meta(machine).get("namespace") == namespace):
                return machine
    for machine in machines:
        if ((machine.get("status") or {}).get("nodeRef") or {}).get("name") == name:
            return machine
    return None


def owning_group(machine: Mapping[str, Any]) -> Optional[Tuple[str, str]]:
    """(label, value) of the Machine's MachineDeployment, else of its MachineSet; None if standalone."""
    labels = meta(machine).get("labels") or {}
    for label in GROUP_LABELS:
        if labels.get(label):
            return label, labels[label]
    return None


def parse_time(text: Optional[str]) -> Optional[datetime.datetime]:
    """An RFC 3339 time of the API server ('2026-11-30T03:00:12Z'), as an aware datetime."""
    return parse_rfc3339(text)


def rfc3339(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class ReplaceRecord:
    """What the old Node carries while its Machine is replaced (annotation RECORD_ANNOTATION)."""

    namespace: str
    machine: str
    uid: str
    group: Tuple[str, str]
    since: str  # RFC 3339, when the delete was sent
    machines_before: Tuple[str, ...] = ()  # uids of the group's Machines then

    def encode(self) -> str:
        return json.dumps({"namespace": self.namespace, "machine": self.machine, "uid": self.uid,
                           "group": list(self.group), "since": self.since,
                           "machines_before": list(self.machines_before)}, sort_keys=True)

    @classmethod
    def decode(cls, text: Optional[str]) -> Optional["ReplaceRecord"]:
        try:
            data = json.loads(text or "")
            return cls(namespace=data["namespace"], machine=data["machine"], uid=data["uid"],
                       group=(data["group"][0], data["group"][1]), since=data["since"],
                       machines_before=tuple(data.get("machines_before") or ()))
        except (TypeError, ValueError, KeyError, IndexError):
            return None

    @property
    def machine_ref(self) -> str:
        return "%s/%s" % (self.namespace, self.machine)

    @property
    def group_ref(self) -> str:
        return "%s %s/%s" % (GROUP_KINDS.get(self.group[0], self.group[0]), self.namespace, self.group[1])


def new_machines(machines: Sequence[Mapping[str, Any]], record: ReplaceRecord) -> List[Mapping[str, Any]]:
    """The group's Machines that came after the delete: not the deleted one, not there before.

    Without the list of the Machines from before (a rerun), those created since the delete.
    """
    since = parse_time(record.since)
    found = []
    for machine in machines:
        uid = meta(machine).get("uid")
        if uid == record.uid or (meta(machine).get("labels") or {}).get(record.group[0]) != record.group[1]:
            continue
        if record.machines_before:
            if uid in record.machines_before:
                continue
        else:
            created = parse_time(meta(machine).get("creationTimestamp"))
            if since is None or created is None or created < since:
                continue
        found.append(machine)
    return found


def pick_new_node(machines: Sequence[Mapping[str, Any]], nodes: Mapping[str, Mapping[str, Any]],
                  record: ReplaceRecord, old_node: str, old_node_uid: Optional[str]) -> Optional[str]:
    """The Ready Node of a new Machine of the group (oldest Machine first); None while there is none.

    A Node that says it replaces another node than ``old_node`` is taken already.
    """
    ordered = sorted(new_machines(machines, record), key=lambda m: (meta(m).get("creationTimestamp") or "",
                                                                    meta(m).get("name") or ""))
    for machine in ordered:
        name = ((machine.get("status") or {}).get("nodeRef") or {}).get("name")
        node = nodes.get(name or "")
        if node is None or meta(node).get("uid") == old_node_uid or not node_ready(node):
            continue
        if (meta(node).get("annotations") or {}).get(REPLACES_ANNOTATION) not in (None, "", old_node):
            continue
        return name
    return None


# ---------------------------------------------------------------- I/O


@dataclass
class Outcome:
    changed: bool
    replacement: Optional[str] = None
    machine: Optional[str] = None
    actions: List[str] = field(default_factory=list)


class ClusterApiNodes:
    """Nodes and Machines through a CoreV1Api and a CustomObjectsApi."""

    def __init__(self, core: Any, custom: Any, version: str, wait_timeout: float = 300.0,
                 namespace: Optional[str] = None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.timezone.utc)) -> None:
        self.core = core
        self.custom = custom
        self.version = version
        self.wait_timeout = float(wait_timeout)
        self.namespace = namespace or None
        self.sleep = sleep
        self.clock = clock
        self.now = now

    @classmethod
    def connect(cls, connection: Connection, timeout: Optional[Tuple[float, float]] = None,
                **kwargs: Any) -> "ClusterApiNodes":
        core = core_v1(timeout=timeout, connection=connection)
        version = served_version(core.api_client)
        return cls(core, k8s_client.CustomObjectsApi(core.api_client), version, **kwargs)

    # -- reading ---------------------------------------------------------------------------
    def _dict(self, obj: Any) -> Dict[str, Any]:
        return obj if isinstance(obj, dict) else self.core.api_client.sanitize_for_serialization(obj)

    def read_node(self, name: str) -> Optional[Dict[str, Any]]:
        try:
            return self._dict(self.core.read_node(name))
        except ApiException as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise api_error(exc, "read node %s" % name) from exc

    def nodes(self) -> Dict[str, Dict[str, Any]]:
        try:
            listed = self.core.list_node()
        except ApiException as exc:
            raise api_error(exc, "list nodes") from exc
        return {meta(node)["name"]: node for node in (self._dict(item) for item in listed.items)}

    def machines(self, namespace: Optional[str] = None, selector: Optional[str] = None) -> List[Dict[str, Any]]:
        namespace = namespace or self.namespace
        try:
            if namespace:
                listed = self.custom.list_namespaced_custom_object(GROUP, self.version, namespace, MACHINES,
                                                                   label_selector=selector or "")
            else:
                listed = self.custom.list_cluster_custom_object(GROUP, self.version, MACHINES,
                                                                label_selector=selector or "")
        except ApiException as exc:
            if getattr(exc, "status", None) == 404:
                raise ClusterApiError("Cluster API %s/%s Machines are not served by this API server: is Cluster API "
                                      "installed?" % (GROUP, self.version), 404) from exc
            raise api_error(exc, "list Machines%s" % (" in namespace %s" % namespace if namespace else "")) from exc
        return list(listed.get("items") or [])

    def annotate(self, node: str, annotations: Mapping[str, Optional[str]]) -> None:
        try:
            self.core.patch_node(node, {"metadata": {"annotations": dict(annotations)}}, _content_type=MERGE_PATCH)
        except ApiException as exc:
            raise api_error(exc, "annotate node %s" % node) from exc

    def delete_machine(self, namespace: str, name: str, uid: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(GROUP, self.version, namespace, MACHINES, name,
                                                        body={"preconditions": {"uid": uid}})
        except ApiException as exc:
            if getattr(exc, "status", None) in (404, 409):  # gone, or a new Machine of that name: not ours
                return
            raise api_error(exc, "delete Machine %s/%s" % (namespace, name)) from exc

    def replacement_of(self, name: str) -> Optional[str]:
        """A Ready node that says it replaces ``name``."""
        for node_name, node in self.nodes().items():
            if (meta(node).get("annotations") or {}).get(REPLACES_ANNOTATION) == name and node_ready(node):
                return node_name
        return None

    # -- replace ---------------------------------------------------------------------------
    def replace(self, name: str, remediation_id: Optional[str] = None, check_mode: bool = False) -> Outcome:
        old = self.read_node(name)
        done = self.replacement_of(name)
        if done:
            return Outcome(changed=False, replacement=done)
        record = ReplaceRecord.decode((meta(old).get("annotations") or {}).get(RECORD_ANNOTATION)) if old else None
        machine = None
        if old is not None:
            machine = machine_of_node(old, self._machines_for(old))
        else:
            machine = machine_of_node({"metadata": {"name": name}}, self.machines())
        if machine is None and record is None:
            if old is None:
                raise FieldError("name", "node %s does not exist, no Machine names it in status.nodeRef, and no node "
                                 "carries %s=%s" % (name, REPLACES_ANNOTATION, name))
            where = "namespace %s" % self.namespace if self.namespace else "any namespace"
            raise FieldError("name", "node %s has no Cluster API Machine: no annotation %s, and no Machine in %s has "
                             "status.nodeRef.name=%s" % (name, MACHINE_ANNOTATION, where, name))
        actions: List[str] = []
        if machine is not None:
            ref = "%s/%s" % (meta(machine).get("namespace"), meta(machine).get("name"))
            if record is None or record.uid != meta(machine).get("uid"):
                group = owning_group(machine)
                if group is None:
                    raise ClusterApiError("Machine %s belongs to no MachineDeployment or MachineSet (no label %s): "
                                          "deleting it would bring no replacement" % (ref, " or ".join(GROUP_LABELS)))
                namespace = meta(machine)["namespace"]
                before = self.machines(namespace, "%s=%s" % group)
                record = ReplaceRecord(namespace=namespace, machine=meta(machine)["name"], uid=meta(machine)["uid"],
                                       group=group, since=rfc3339(self.now()),
                                       machines_before=tuple(sorted(meta(m)["uid"] for m in before)))
                if old is not None and not check_mode:
                    # First the record, then the delete: a rerun after a crash in between knows what to wait for.
                    self.annotate(name, {RECORD_ANNOTATION: record.encode()})
            # A Machine already deleting (Cluster API drains it first) needs no second delete.
            if not meta(machine).get("deletionTimestamp"):
                actions.append("delete Machine %s of %s" % (ref, record.group_ref))
                if not check_mode:
                    self.delete_machine(record.namespace, record.machine, record.uid)
        if record is None:  # not reachable: both branches above set it
            raise ClusterApiError("no replacement record for node %s" % name)
        if check_mode:
            actions.append("wait up to %gs for a new Ready node of %s" % (self.wait_timeout, record.group_ref))
            return Outcome(changed=True, machine=record.machine_ref, actions=actions)
        began = self.clock()
        new = self._wait_new_node(record, name, meta(old).get("uid") if old else None)
        actions.append("new node %s of %s Ready after %.1fs" % (new, record.group_ref, self.clock() - began))
        annotations = {REPLACES_ANNOTATION: name}
        if remediation_id:
            annotations[REMEDIATION_ID_ANNOTATION] = remediation_id
        self.annotate(new, annotations)
        actions.append("annotate node %s with %s" % (new, ", ".join("%s=%s" % i for i in sorted(annotations.items()))))
        return Outcome(changed=True, replacement=new, machine=record.machine_ref, actions=actions)

    def _machines_for(self, node: Mapping[str, Any]) -> List[Dict[str, Any]]:
        annotations = meta(node).get("annotations") or {}
        namespace = annotations.get(CLUSTER_NAMESPACE_ANNOTATION) if annotations.get(MACHINE_ANNOTATION) else None
        return self.machines(namespace or self.namespace)

    def _wait_new_node(self, record: ReplaceRecord, old_name: str, old_uid: Optional[str]) -> str:
        deadline = self.clock() + self.wait_timeout
        while True:
            machines = self.machines(record.namespace, "%s=%s" % record.group)
            found = pick_new_node(machines, self.nodes(), record, old_name, old_uid)
            if found:
                return found
            if self.clock() >= deadline:
                raise ClusterApiError(
                    "Machine %s was deleted, but no new Ready node of %s came within %gs (new Machines: %s); "
                    "check the MachineDeployment's replicas and the infrastructure provider, then run again"
                    % (record.machine_ref, record.group_ref, self.wait_timeout,
                       ", ".join(meta(m).get("name") or "?" for m in new_machines(machines, record)) or "none"))
            self.sleep(1.0)


def served_version(api_client: Any) -> str:
    """The preferred version of the cluster.x-k8s.io group on this API server."""
    if k8s_client is None:
        raise KubeError("the Python 'kubernetes' package is required (pip install kubernetes)")
    try:
        groups = k8s_client.ApisApi(api_client).get_api_versions().groups or []
    except ApiException as exc:
        raise api_error(exc, "list the API groups") from exc
    for group in groups:
        if group.name == GROUP:
            return group.preferred_version.version
    raise ClusterApiError("the API server serves no %s group: Cluster API is not installed there "
                          "(provider clusterapi needs its Machine CRD)" % GROUP)
