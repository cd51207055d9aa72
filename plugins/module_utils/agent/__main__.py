# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""gpufleet-agent: ``python -m ansible_collections.gpufleet.resilience.plugins.module_utils.agent``.

    --config FILE        the agent's YAML configuration (required)
    --check-config       validate FILE, print the effective configuration as JSON, exit 0 (or 2)

Exit status: 0 after a clean stop (SIGTERM/SIGINT), 2 for a bad configuration, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import List, Optional

from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.settings import ConfigError, load_config
from ansible_collections.gpufleet.resilience.plugins.module_utils.json_logs import setup_logging


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="gpufleet-agent", description="GPU health agent of gpufleet.resilience")
    parser.add_argument("--config", required=True, help="path of the agent's YAML configuration")
    parser.add_argument("--check-config", action="store_true", help="validate the configuration and exit")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        sys.stderr.write("config error: %s\n" % exc)
        return 2
    if args.check_config:
        # Sets (infiniband.thresholds.ignore) print as sorted lists.
        sys.stdout.write(json.dumps(asdict(config), indent=2, sort_keys=True, default=sorted) + "\n")
        return 0
    setup_logging(config.log_level)
    # Imported here so --check-config works on a host without pynvml or kubernetes.
    from ansible_collections.gpufleet.resilience.plugins.module_utils.agent.loop import Agent

    agent = Agent(config, reload=lambda: load_config(args.config))
    agent.install_signal_handlers()
    return agent.run()


if __name__ == "__main__":
    raise SystemExit(main())
