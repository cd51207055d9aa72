"""parse_scontrol on the captures of Slurm 22.05, 24.11 and 26.05, and on the reasons people write."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.errors import SlurmParseError
from ansible_collections.gpufleet.resilience.plugins.module_utils.slurm.parse_scontrol import (
    parse_jobs_text,
    parse_nodes_json,
    parse_nodes_text,
    parse_ping,
    parse_record,
    parse_requeue_exit,
    parse_version,
    split_records,
)

VERSIONS = ("22.05", "24.11", "26.05")
DRAIN_REASON = "gpufleet: Xid79 GPU-fc522a91 (remediation r-1)"
# Per version: GPUs, CPUs, memory, features and the two nodes' weights of the captured lab.
LAB = {
    "22.05": dict(gpus=8, cpus=16, memory_mb=65536, features=[], weights=(1, 1), drained_at="2026-11-30T10:00:22"),
    "24.11": dict(gpus=2, cpus=4, memory_mb=4000, features=["pool-gpu-a"], weights=(10, 20),
                  drained_at="2026-11-30T09:58:59"),
    "26.05": dict(gpus=2, cpus=4, memory_mb=4000, features=["pool-gpu-a"], weights=(10, 20),
                  drained_at="2026-12-04T00:13:49"),
}


@pytest.mark.parametrize("version", VERSIONS)
def test_version(captures, version):
    parsed = parse_version(captures.text(version + "/scontrol_version.txt"))
    assert str(parsed) == {"22.05": "22.05.8", "24.11": "24.11.5", "26.05": "26.05.5"}[version]
    assert parsed.at_least(22, 5) and parsed.at_least(25, 11) == (version == "26.05")


def test_version_garbage():
    with pytest.raises(SlurmParseError):
        parse_version("scontrol: fatal: Could not establish a configuration source")


@pytest.mark.parametrize("version", VERSIONS)
def test_oneliner_nodes(captures, version):
    lab = LAB[version]
    nodes = parse_nodes_text(captures.text(version + "/scontrol_show_node_oneliner.txt"))
    running, drained = nodes["gpu-a-001"], nodes["gpu-a-002"]
    assert (running.state, running.flags, running.reason, running.reason_user) == ("MIXED", (), None, None)
    assert (drained.state, drained.flags, drained.long_state) == ("IDLE", ("DRAIN",), "drained")
    assert drained.reason == DRAIN_REASON
    assert (drained.reason_user, drained.reason_time) == ("root", lab["drained_at"])
    for node in (running, drained):
        assert node.gres.startswith("gpu:") and node.gpus == lab["gpus"]
        assert (node.cpus, node.memory_mb, node.partitions) == (lab["cpus"], lab["memory_mb"], ("gpu",))
        assert list(node.features) == list(node.active_features) == lab["features"]
    assert (running.weight, drained.weight) == lab["weights"]
    # FUTURE nodes are hidden without --future (24.11's gpu-a-003 is one).
    assert "gpu-a-003" not in nodes or version == "22.05"


@pytest.mark.parametrize("version", VERSIONS)
def test_down_node(captures, version):
    node = parse_nodes_text(captures.text(version + "/scontrol_show_node_down.txt"))["gpu-a-001"]
    assert (node.state, node.flags, node.long_state) == ("DOWN", (), "down")
    assert node.reason == "gpufleet: Xid79 test down" and node.reason_user == "root"


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_multiline_equals_oneliner(captures, version):
    multi = parse_nodes_text(captures.text(version + "/scontrol_show_node.txt"))
    single = parse_nodes_text(captures.text(version + "/scontrol_show_node_oneliner.txt"))
    assert multi == single
    assert len(split_records(captures.text(version + "/scontrol_show_node.txt"))) == 2


@pytest.mark.parametrize("version", ["24.11", "26.05"])
def test_json_equals_text(captures, utc, version):
    from_json = parse_nodes_json(captures.text(version + "/scontrol_show_node.json"))
    from_text = parse_nodes_text(captures.text(version + "/scontrol_show_node_oneliner.txt"))
    assert from_json == from_text


@pytest.mark.parametrize("answer", ["nodes.json", "nodes_previous.json"])
def test_slurmrestd_26_05_nodes_equal_the_cli(captures, utc, answer):
    """slurmrestd's answer (data parser v0.0.45, and v0.0.44 from the same server) is the CLI's model."""
    from_rest = parse_nodes_json(captures.text("26.05/rest/" + answer))
    assert from_rest == parse_nodes_json(captures.text("26.05/scontrol_show_node.json"))


@pytest.mark.parametrize("answer, why", [("node_unknown.json", "Failure to query node nosuch"),
                                         ("bad_token.json", "Protocol authentication error")])
def test_slurmrestd_26_05_errors_are_raised(captures, answer, why):
    with pytest.raises(SlurmParseError, match=why):
        parse_nodes_json(captures.text("26.05/rest/" + answer))


def test_22_05_refuses_two_node_names(captures):
    # `scontrol show node A B` on 22.05: "too many arguments for keyword:show".
    with pytest.raises(SlurmParseError, match="without NodeName"):
        parse_nodes_text(captures.text("22.05/scontrol_show_node.txt"))


def test_22_05_scontrol_has_no_json(captures):
    with pytest.raises(SlurmParseError, match="not JSON"):
        parse_nodes_json(captures.text("22.05/scontrol_show_node.json"))


@pytest.mark.parametrize("version", VERSIONS)
def test_jobs_oneliner(captures, version):
    jobs = parse_jobs_text(captures.text(version + "/scontrol_show_job_oneliner.txt"))
    train, pending = jobs[0], jobs[1]
    assert (train.name, train.state, train.nodes, train.batch_host) == ("train", "RUNNING", ("gpu-a-001",), "gpu-a-001")
    assert (train.requeue, train.restarts, train.user, train.partition) == (True, 0, "root", "gpu")
    assert (pending.state, pending.reason, pending.nodes) == ("PENDING", "Resources", ())


# What remediation and operators write as a reason: Slurm keeps it whole, so must we.
TRICKY_REASONS = [
    "gpufleet: XID 79 on GPU 3 | fenced",
    "State=DOWN Weight=9 looks like fields",
    "bracket [user@2026-01-01T00:00:00] inside",
    "trailing [x@y]",
    "é unicode — dash",
]


@pytest.mark.parametrize("reason", TRICKY_REASONS)
def test_reason_is_never_split(reason):
    stamp = " [root@2026-11-30T10:00:22]"
    oneliner = ("NodeName=n1 CPUTot=16 Gres=gpu:8 State=IDLE+DRAIN Weight=1 Partitions=gpu  "
                "CfgTRES=cpu=16 CurrentWatts=0 Reason=%s%s\n" % (reason, stamp))
    multiline = ("NodeName=n1 Arch=x86_64 CoresPerSocket=1\n   CPUTot=16\n   Gres=gpu:8\n"
                 "   State=IDLE+DRAIN ThreadsPerCore=1 Weight=1\n   Partitions=gpu \n   \n"
                 "   Reason=%s%s\n\n" % (reason, stamp))
    for text in (oneliner, multiline):
        node = parse_nodes_text(text)["n1"]
        assert node.reason == reason
        assert (node.reason_user, node.reason_time) == ("root", "2026-11-30T10:00:22")
        assert (node.state, node.flags, node.weight, node.gpus, node.partitions) == (
            "IDLE", ("DRAIN",), 1, 8, ("gpu",))


def test_reason_without_stamp_runs_to_the_end_of_its_line():
    fields = parse_record("NodeName=n1 State=DOWN\n   Reason=cable pulled Key=v \n   Weight=3", "Reason")
    assert fields["Reason"] == "cable pulled Key=v"
    assert fields["Weight"] == "3" and "ReasonUser" not in fields


def test_values_with_spaces_and_equals():
    fields = parse_record("NodeName=n1 OS=Linux 6.18 #1 SMP PREEMPT @0  CfgTRES=cpu=16,mem=64G AllocTRES= Port=1")
    assert fields["OS"] == "Linux 6.18 #1 SMP PREEMPT @0"
    assert fields["CfgTRES"] == "cpu=16,mem=64G" and fields["AllocTRES"] == "" and fields["Port"] == "1"


@pytest.mark.parametrize("state, expected", [
    ("DOWN*", ("DOWN", ("NOT_RESPONDING",), "down*")),
    ("IDLE+DRAIN+NOT_RESPONDING", ("IDLE", ("DRAIN", "NOT_RESPONDING"), "drained*")),
    ("MIXED+DRAIN", ("MIXED", ("DRAIN",), "draining")),
    ("IDLE+CLOUD+POWERED_DOWN", ("IDLE", ("CLOUD", "POWERED_DOWN"), "idle~")),
    ("FUTURE", ("FUTURE", (), "future")),
    ("UNKNOWN*", ("UNKNOWN", ("NOT_RESPONDING",), "unknown*")),
])
def test_node_states(state, expected):
    node = parse_nodes_text("NodeName=n1 State=%s Weight=1\n" % state)["n1"]
    assert (node.state, node.flags, node.long_state) == expected


def test_ping():
    assert parse_ping("Slurmctld(primary) at ctl-1 is UP\nSlurmctld(backup) at ctl-2 is DOWN\n") == [
        dict(role="primary", host="ctl-1", state="UP"), dict(role="backup", host="ctl-2", state="DOWN")]
    assert parse_ping("") == []


def test_requeue_exit():
    config = "JobRequeue              = 1\nRequeueExit             = 75,80-82\nRequeueExitHold         = (null)\n"
    assert parse_requeue_exit(config) == [75, 80, 81, 82]
    assert parse_requeue_exit("RequeueExit             = (null)\n") == []
    assert parse_requeue_exit("RequeueExitHold = 75\n") == []
    with pytest.raises(SlurmParseError, match="RequeueExit is not a list of codes"):
        parse_requeue_exit("RequeueExit = 75,x\n")


def test_a_finished_jobs_exit_code_and_none_while_it_runs_or_after_a_signal():
    text = ("JobId=7 JobName=a JobState=FAILED Requeue=1 Restarts=0 ExitCode=75:0\n"
            "JobId=8 JobName=b JobState=FAILED Requeue=1 Restarts=0 ExitCode=0:15\n"
            "JobId=9 JobName=c JobState=RUNNING Requeue=1 Restarts=0 ExitCode=0:0\n")
    assert [job.exit_code for job in parse_jobs_text(text)] == [75, None, None]
