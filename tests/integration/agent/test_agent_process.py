"""The agent as a process on the fake NVML (no lab needed): its command line, its signals, its logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from agent_probe import wait_for
from lab_harness import REPO

from ansible_collections.gpufleet.resilience.plugins.module_utils.lab import fake_gpu_state

pytestmark = [pytest.mark.integration]

MODULE = "ansible_collections.gpufleet.resilience.plugins.module_utils.agent"
PORT = 29471


def agent_argv(config):
    return [sys.executable, "-m", MODULE, "--config", str(config)]


def env_for(gpus):
    return dict(os.environ, GPUFLEET_FAKE_NVML_DIR=str(gpus), PYTHONPATH=str(REPO / "collections"))


@pytest.fixture()
def node(tmp_path, fake_nvml_lib):
    gpus = tmp_path / "gpus"
    fake_gpu_state.init(str(gpus), 8, "proc-node", "NVIDIA-H100-80GB-HBM3")
    config = {"node": "proc-node", "nvml": {"library_path": str(fake_nvml_lib)},
              "kernel_log": {"source": "file", "path": str(tmp_path / "kmsg.log")},
              "metrics": {"port": PORT}, "kubernetes": {"enabled": False},
              "journal": str(tmp_path / "events.jsonl")}
    path = tmp_path / "agent.yml"
    path.write_text(json.dumps(config))
    return {"dir": tmp_path, "gpus": gpus, "config": path, "data": config}


def verdict(port=PORT):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=2) as answer:
            text = answer.read().decode()
    except OSError:  # not listening yet
        return None
    for line in text.splitlines():
        if line.startswith("gpufleet_node_health_verdict{") and line.endswith(" 1.0"):
            return line.split('state="', 1)[1].split('"', 1)[0]
    return None


def test_check_config(node):
    done = subprocess.run([*agent_argv(node["config"]), "--check-config"], env=env_for(node["gpus"]),
                          capture_output=True, text=True, check=False, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["node"] == "proc-node"
    node["config"].write_text(json.dumps(dict(node["data"], interval=-1)))
    done = subprocess.run([*agent_argv(node["config"]), "--check-config"], env=env_for(node["gpus"]),
                          capture_output=True, text=True, check=False, timeout=30)
    assert done.returncode == 2 and done.stderr.startswith("config error: interval:")


def test_signals_reload_forget_and_stop(node):
    log = open(node["dir"] / "agent.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(agent_argv(node["config"]), env=env_for(node["gpus"]), stdout=log,
                               stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: verdict() == "healthy", 20, interval=0.2)
        # SIGHUP with a bad file: logged, ignored, still running with the old configuration.
        node["config"].write_text("node: [broken\n")
        process.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert process.poll() is None and verdict() == "healthy"
        # SIGHUP with a good file: a lower temperature limit makes a 50 C GPU too hot.
        fake_gpu_state.set_fields(str(node["gpus"]), 0, temperature=50)
        node["config"].write_text(json.dumps(dict(node["data"], thresholds={"temperature_max_c": 45})))
        process.send_signal(signal.SIGHUP)
        wait_for(lambda: verdict() == "degraded", 5)
        # SIGUSR1 forgets the XID history (after a GPU reset), not the counters.
        node["config"].write_text(json.dumps(node["data"]))
        process.send_signal(signal.SIGHUP)
        wait_for(lambda: verdict() == "healthy", 5)
        fake_gpu_state.inject_xid(str(node["gpus"]), 1, 79)
        wait_for(lambda: verdict() == "fatal", 5)
        process.send_signal(signal.SIGUSR1)
        wait_for(lambda: verdict() == "healthy", 5)
        # SIGTERM: a clean stop, exit status 0, the port released.
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(10) == 0
        assert time.monotonic() - started < 3
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()
    lines = [json.loads(line) for line in (node["dir"] / "agent.log").read_text().splitlines() if line.startswith("{")]
    messages = [line["msg"] for line in lines]
    assert "agent started" in messages and "agent stopped" in messages and "configuration reloaded" in messages
    assert any(line.get("source") == "config" for line in lines)  # the refused reload, named
    assert all(line["level"] in ("debug", "info", "warning", "error") for line in lines)
