# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""The kernel's InfiniBand sysfs format (drivers/infiniband/core/sysfs.c), as facts: the codes and
names a port's ``state`` and ``phys_state`` files carry (``4: ACTIVE``, ``5: LinkUp``) and the
counters under ``counters/``. The agent's reader (health/infiniband.py) and the lab's fake tree
(lab/fake_ib.py) both use it; neither may import the other.
"""

import re

STATE_NAMES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE", 5: "ACTIVE_DEFER"}
PHYS_STATE_NAMES = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "PortConfigurationTraining", 5: "LinkUp",
                    6: "LinkErrorRecovery", 7: "Phy Test"}
ACTIVE, LINK_UP = 4, 5
COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "port_xmit_discards",
            "local_link_integrity_errors", "excessive_buffer_overrun_errors")
# A state file's text ("4: ACTIVE": code, name) and a rate's ("400 Gb/sec (4X NDR)": Gb/s).
CODED = re.compile(r"(\d+)\s*:\s*(\S.*)")
RATE = re.compile(r"(\d+(?:\.\d+)?)\s*Gb/sec\b.*")
