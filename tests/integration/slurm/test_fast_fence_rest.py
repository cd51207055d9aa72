"""The agent's fast fence with ``slurm_api: rest`` against the Slurm-only 26.05 lab's real slurmrestd:
the settings a DaemonSet agent on a Slinky site has (slurmrestd's URL and a token file, no scontrol,
no munge key) drain the node on a fatal verdict, keep someone else's fence, and report an
unreachable slurmrestd as an error, then fence once it answers.

Every test leaves the cluster as it found it.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List

import pytest
from slurm_clusters import SlurmCluster, wait_for

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.config import parse_config
from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.fast_fence import FastFence, fence_client
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.client import SlurmClient
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.rest import mint_token
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.runner import SlurmRunner

pytestmark = [pytest.mark.integration]

REASON = "gpufleet: Xid79 GPU 3 (agent fast fence)"


@pytest.fixture(scope="module")
def cluster(slurm_lab) -> SlurmCluster:
    return SlurmCluster(lab=slurm_lab, version="26.05")


@pytest.fixture(scope="module")
def cli(slurm_lab) -> SlurmClient:
    return SlurmClient(SlurmRunner(slurm_conf=str(slurm_lab.slurm_conf), bin_dir=str(slurm_lab.lab_dir / "bin"),
                                   timeout=30))


@pytest.fixture()
def token_file(slurm_lab, tmp_path):
    """A token for root, as a CronJob would write it into the agent's Secret."""
    key = (slurm_lab.lab_dir / "slurm" / "jwt" / "jwt_hs256.key").read_bytes()
    path = tmp_path / "token"
    path.write_text(mint_token(key, "root", 600) + "\n")
    path.chmod(0o600)
    return path


class Fence:
    """A FastFence built from an agent configuration, as the agent's loop builds it."""

    def __init__(self, node: str, fast_fence: Dict[str, Any]) -> None:
        config = parse_config({"node": node, "fast_fence": dict(fast_fence, enabled=True)})
        self.errors: List[str] = []
        self.fenced: List[str] = []
        self.done = threading.Event()
        self.fence = FastFence(node, lambda: fence_client(config.fast_fence.slurm_params()),
                               on_error=self.errors.append, on_fenced=self._fenced)

    def _fenced(self, outcome: str, reason: str) -> None:
        self.fenced.append(outcome)
        self.done.set()

    def __enter__(self) -> "Fence":
        self.fence.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.fence.stop()


def test_a_fatal_verdict_drains_the_node_through_slurmrestd(cluster, cli, token_file):
    node = "%s-003" % cluster.pool["name"]
    url = "http://127.0.0.1:%d" % cluster.lab.extra_vars["slurm_slurmrestd_port"]
    try:
        with Fence(node, {"slurm_api": "rest", "rest_url": url, "rest_token_file": str(token_file)}) as fence:
            fence.fence.update(True, REASON)
            assert fence.done.wait(30), fence.errors
        assert fence.fenced == ["drained"] and fence.errors == []
        drained = cli.nodes([node], with_jobs=False)[node]
        assert "DRAIN" in drained.flags and drained.reason == REASON
    finally:
        cluster.command("scontrol", "update", "NodeName=%s" % node, "State=RESUME")


def test_someone_elses_fence_is_kept_and_an_unreachable_server_retried(cluster, cli, token_file):
    node = "%s-004" % cluster.pool["name"]
    url = "http://127.0.0.1:%d" % cluster.lab.extra_vars["slurm_slurmrestd_port"]
    cluster.command("scontrol", "update", "NodeName=%s" % node, "State=DRAIN", "Reason=ops: cable swap")
    try:
        with Fence(node, {"slurm_api": "rest", "rest_url": url, "rest_token_file": str(token_file)}) as fence:
            fence.fence.update(True, REASON)
            assert fence.done.wait(30), fence.errors
        assert len(fence.fenced) == 1 and fence.fenced[0].startswith("kept:"), fence.fenced
        assert cli.nodes([node], with_jobs=False)[node].reason == "ops: cable swap"
    finally:
        cluster.command("scontrol", "update", "NodeName=%s" % node, "State=RESUME")

    # Nothing listens on the port: each try is an error naming slurmrestd, and nothing is fenced.
    with Fence(node, {"slurm_api": "rest", "rest_url": "http://127.0.0.1:9", "rest_token_file": str(token_file)}) \
            as refused:
        refused.fence.update(True, REASON)
        wait_for("an error reported", lambda: bool(refused.errors), timeout=10)
    assert "cannot reach slurmrestd" in refused.errors[0] and refused.fenced == []
    assert "DRAIN" not in cli.nodes([node], with_jobs=False)[node].flags
