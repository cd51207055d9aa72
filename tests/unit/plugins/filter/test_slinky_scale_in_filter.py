# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The slinky_scale_in filter: the plan of module_utils/slinky/scale_in (tested there), with a bad
argument named in an AnsibleFilterError. Controller code: here, where ansible-test gives the tests
ansible-core's controller packages."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.resilience.plugins.filter.slinky_scale_in import slinky_scale_in

# Slinky's names (<pool>-<ordinal>, unpadded, so gpu-b-10 sorts after gpu-b-9).
NODES = [{"name": "gpu-b-%d" % n, "state": "IDLE", "flags": [], "features": [], "jobs": []} for n in (10, 0, 9, 1)]


def test_the_filter_names_the_bad_argument_for_ansible():
    with pytest.raises(AnsibleFilterError, match=r"^count: is required"):
        slinky_scale_in(NODES, "gpu-b")
    with pytest.raises(AnsibleFilterError, match="slurm_node_info's nodes"):
        slinky_scale_in({"nodes": NODES}, "gpu-b", remove=True)
    assert slinky_scale_in(NODES, "gpu-b", count="10")["leaving"] == ["gpu-b-10"]
