"""kube/lazy_import.py: the kubernetes client's names resolve when first used, to the same classes
as the eager import, and anything the reader does not know falls back to the eager import."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from ansible_collections.gpufleet.resilience.plugins.module_utils.kube import lazy_import


def run_fresh(code: str, env: dict) -> dict:
    """``code`` in a new interpreter (this one has imported kubernetes already); its last line of
    output, as JSON."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, check=False, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_used_names_load_alone_and_equal_the_eager_ones(child_env):
    found = run_fresh("""
        import json, sys
        from ansible_collections.gpufleet.resilience.plugins.module_utils.kube import lazy_import
        installed = lazy_import.install()
        import kubernetes
        from kubernetes import client, config
        from kubernetes.client.exceptions import ApiException
        api = client.CoreV1Api(client.ApiClient(client.Configuration()))

        class Answer:
            data = json.dumps({"metadata": {"name": "gpu-a-001", "labels": {"gpufleet.io/pool": "gpu-a"}},
                               "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}]},
                               "status": {"conditions": [{"type": "GpuHealthy", "status": "False"}]}})

        node = api.api_client.deserialize(Answer(), "V1Node")
        loaded = len([name for name in sys.modules if name.startswith("kubernetes.client.models.")])
        print(json.dumps({
            "installed": installed, "version": kubernetes.__version__, "models_loaded": loaded,
            "node": [type(node).__name__, node.metadata.name, node.spec.unschedulable, node.spec.taints[0].effect,
                     node.status.conditions[0].type],
            "classes": {name: "%s.%s" % (getattr(client, name).__module__, getattr(client, name).__name__)
                        for name in ("CoreV1Api", "CustomObjectsApi", "V1Eviction", "V1DeleteOptions", "ApiClient",
                                     "Configuration", "ApiException")},
            "exception_same": client.ApiException is ApiException,
            "config": callable(config.new_client_from_config),
        }))
    """, child_env)
    eager = run_fresh("""
        import json
        from kubernetes import client
        print(json.dumps({name: "%s.%s" % (getattr(client, name).__module__, getattr(client, name).__name__)
                          for name in ("CoreV1Api", "CustomObjectsApi", "V1Eviction", "V1DeleteOptions", "ApiClient",
                                       "Configuration", "ApiException")}))
    """, child_env)
    assert found["installed"] is True
    assert found["classes"] == eager
    assert found["exception_same"] and found["config"]
    assert found["node"] == ["V1Node", "gpu-a-001", True, "NoSchedule", "GpuHealthy"]
    # Only what was used: a node and what it holds, not the ~700 models of the eager import.
    assert 0 < found["models_loaded"] < 60, found["models_loaded"]
    assert found["version"].split(".")[0].isdigit()


def test_every_name_of_the_client_package_resolves(child_env):
    found = run_fresh("""
        import json, os
        from ansible_collections.gpufleet.resilience.plugins.module_utils.kube import lazy_import
        assert lazy_import.install()
        import kubernetes
        from kubernetes import client
        names = lazy_import._names(os.path.join(kubernetes.__path__[0], "client", "__init__.py"))
        missing = [name for name in names if getattr(client, name, None) is None]
        models = lazy_import._names(os.path.join(kubernetes.__path__[0], "client", "models", "__init__.py"))
        print(json.dumps({"names": len(names), "models": len(models), "missing": missing}))
    """, child_env)
    assert found["names"] > 500 and found["models"] > 500 and found["missing"] == []


def test_an_init_with_a_statement_it_does_not_know_is_imported_eagerly(tmp_path):
    known = tmp_path / "known.py"
    known.write_text('"""\n    Kubernetes (generated)\n"""\nfrom __future__ import absolute_import\n'
                     '__version__ = "36.0.0"\n# apis\nfrom kubernetes.client.api.core_v1_api import CoreV1Api\n\n')
    assert lazy_import._names(str(known)) == {"CoreV1Api": "kubernetes.client.api.core_v1_api"}
    unknown = tmp_path / "unknown.py"
    unknown.write_text(known.read_text() + "CoreV1Api.extra = 1\n")
    assert lazy_import._names(str(unknown)) is None
    assert lazy_import._names(str(tmp_path / "absent.py")) is None


def test_nothing_changes_once_kubernetes_is_imported():
    import kubernetes  # noqa: F401 - the test process has it; install() must leave it alone

    before = sys.modules["kubernetes"]
    assert lazy_import.install() is False
    assert sys.modules["kubernetes"] is before
