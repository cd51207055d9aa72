# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""gpu_burn_sim: the lab's stand-in for gpu-burn, run as a Slurm job on a simulated node.

The lab's GPUs are files (the fake NVML's state directory), so nothing can be burnt. This reads
each GPU's state where a real burn would find its faults, and prints what gpu-burn prints, so the
remediation's validation reads it with the same parser as a real burn's:

* a progress line: ``100.0%  proc'd: <n> (<rate> Gflop/s) - ...  errors: 0 - ...  temps: 35 C - ...``,
  each GPU's rate its product's nominal rate times its simulated throughput (``perf_permille``,
  which a GPU reset keeps: a slow GPU stays slow);
* ``GPU <i>: OK`` or ``GPU <i>: FAULTY``: FAULTY where a burn would compute wrong results or die:
  the GPU is lost, has volatile double-bit ECC errors, a failed or pending row remap, or pending
  retired pages;
* ``Tested <n> GPUs``.

Standard library only (and ``lab_gpu_state.py`` beside it): the lab's job Python runs it. Exit 0
whatever it found, as gpu-burn does.
"""

import argparse
import sys
import time

from lab_gpu_state import flag, number, read_gpus

NOMINAL_GFLOPS = 50000.0  # an H100's double-precision tensor rate, in gpu-burn's unit


def faulty(state):
    return (flag(state, "lost") or number(state, "ecc_dbe_volatile") > 0 or flag(state, "remapped_rows_failure")
            or flag(state, "remapped_rows_pending") or flag(state, "retired_pages_pending"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", required=True, help="the node's fake NVML state directory")
    parser.add_argument("--seconds", type=float, default=3.0, help="how long the burn lasts")
    args = parser.parse_args(argv)
    states = read_gpus(args.state_dir)
    count = len(states)
    print("Burning for %d seconds." % args.seconds, flush=True)
    time.sleep(max(0.0, args.seconds))
    rates = [NOMINAL_GFLOPS * (int(state.get("perf_permille") or 1000) / 1000.0) for state in states]
    processed = " - ".join("%d (%d Gflop/s)" % (rate * args.seconds / 100, rate) for rate in rates)
    errors = " - ".join(["0"] * len(states))
    temps = " - ".join("%s C" % (state.get("temperature") or "35") for state in states)
    print("100.0%%  proc'd: %s   errors: %s   temps: %s" % (processed, errors, temps))
    print("Killing processes.. done")
    print("")
    print("Tested %d GPUs:" % count)
    for gpu, state in enumerate(states):
        print("\tGPU %d: %s" % (gpu, "FAULTY" if faulty(state) else "OK"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
