# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""How a module reaches Slurm: its commands (cli) or slurmrestd (rest), module_utils/slurm/connect.py."""

from __future__ import annotations


class ModuleDocFragment:
    # The commands' options (slurm_api cli) and the timeout. A module that takes them takes REST too:
    # it lists both fragments, gpufleet.resilience.slurm_api and gpufleet.resilience.slurm_api.rest.
    DOCUMENTATION = r"""
options:
  slurm_conf:
    description:
      - V(cli) - path of C(slurm.conf), passed to the commands as E(SLURM_CONF). Omit for Slurm's
        default (or E(SLURM_CONF) of the environment).
    type: path
  bin_dir:
    description:
      - V(cli) - directory holding the Slurm commands. Omit to search E(PATH).
    type: path
  timeout:
    description:
      - Seconds each Slurm command or slurmrestd call may take before the module fails.
    type: float
    default: 30
"""

    # slurm_api and the rest_* options: alone for modules that name the commands' options their own
    # way (the chaos modules' slurm_conf and slurm_bin_dir).
    REST = r"""
options:
  slurm_api:
    description:
      - How to reach Slurm. V(cli) runs C(scontrol), C(sinfo), C(squeue) and C(scancel) on the host
        (munge and a route to slurmctld needed). V(rest) calls slurmrestd at O(rest_url) with a JWT, as a
        Slinky site's RestApi serves it, with no Slurm commands and no munge key.
    type: str
    choices: [cli, rest]
    default: cli
  rest_url:
    description:
      - V(rest) - URL of slurmrestd, for example V(https://slurm-restapi.slurm.svc:6820). Plain V(http) only
        to loopback, or with O(rest_allow_http).
    type: str
  rest_user:
    description:
      - V(rest) - the Slurm user the token is for (it must be a Slurm operator to drain or resume nodes
        and act on other users' jobs).
    type: str
    default: root
  rest_jwt_key_file:
    description:
      - V(rest) - the cluster's JWT key (HS256; on Slinky the release's JWT key Secret); the module mints
        short-lived tokens with it. Whoever reads it can act as any Slurm user; keep it 0600.
      - Exactly one of O(rest_jwt_key_file) and O(rest_token_file).
    type: path
  rest_token_file:
    description:
      - V(rest) - a file holding a token (C(scontrol token)) that another process keeps fresh; read again
        when it changes, and an expired one is refused before anything is sent.
    type: path
  rest_token_lifespan:
    description:
      - V(rest) - seconds a minted token lives; a new one is minted when a third is left.
    type: int
    default: 600
  rest_ca_file:
    description:
      - V(rest) - CA bundle that signed slurmrestd's certificate; the system's by default.
    type: path
  rest_validate_certs:
    description:
      - V(rest) - verify slurmrestd's TLS certificate. Only turn it off for a test cluster.
    type: bool
    default: true
  rest_allow_http:
    description:
      - V(rest) - allow a plain V(http) O(rest_url) beyond loopback, as a Slinky release's RestApi Service serves it
        (port 6820, no TLS). The token then crosses the network in clear; only where that network is trusted
        (inside the cluster, with a NetworkPolicy).
    type: bool
    default: false
  rest_requeue_exit:
    description:
      - V(rest) - the cluster's C(RequeueExit) codes (C(slurm.conf)), which slurmrestd does not show. A job the
        signal ended FAILED is requeued unless it exited with one of them (slurmctld requeues those itself).
        Give V([]) when C(slurm.conf) has none.
      - Omit where no job is evacuated; an evacuation that needs them then fails, naming this option.
    type: list
    elements: int
"""
