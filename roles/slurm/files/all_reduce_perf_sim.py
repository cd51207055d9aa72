# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)
"""all_reduce_perf_sim: the lab's stand-in for nccl-tests' all_reduce_perf, run as a Slurm job on a
simulated node.

The lab's GPUs are files (the fake NVML's state directory), so no collective can run. This reads
the state of the GPUs the job drives (``-g``) and prints what all_reduce_perf prints for one
process on one node, so the remediation's validation reads it with the same parser as a real
run's:

* one row per message size (``-b`` to ``-e``, times ``-f``): size, count, type, op, root, then
  time, algorithm and bus bandwidth and the wrong-value count, out of place and in place;
* ``# Out of bounds values : <n> OK|FAILED`` and ``# Avg bus bandwidth : <GB/s>``.

The bandwidth follows the slowest GPU of the ring: the peak is the NVLink rate times, for the
worst GPU, the share of its links up (``nvlink_down``, a bitmask of ``nvlink_links``) times its
simulated throughput (``perf_permille``, capped at 1: a GPU that computes slowly, which a reset
keeps, holds up every step's reduction); GPUs without NVLink run at PCIe's rate. Small messages
reach less of it. A GPU
with volatile double-bit ECC errors corrupts the sums (wrong values, FAILED). A lost GPU fails
the run as CUDA does, with no summary (exit 1).

The state directory is ``--state-dir``, or ``<lab>/gpus/$SLURMD_NODENAME`` beside this script's
``<lab>/bin``. Standard library only (and ``lab_gpu_state.py`` beside it): the lab's job Python
runs it.
"""

import argparse
import os
import re
import sys

from lab_gpu_state import flag, number, read_gpus

NVLINK_BUSBW = 480.0  # GB/s: an 8-GPU NVLink 4 ring's bus bandwidth at large sizes
PCIE_BUSBW = 24.0
HALF_SIZE = 64 * 1024 * 1024  # the size at which a ring reaches half its peak
_SIZE = re.compile(r"(\d+)([KMG]?)$", re.I)


def size(text):
    match = _SIZE.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError("not a size: %r" % text)
    return int(match.group(1)) * 1024 ** " KMG".index((match.group(2) or " ").upper())


def links_up_share(state):
    links = number(state, "nvlink_links", 18)
    if not flag(state, "nvlink_supported") or links <= 0:
        return None
    down = bin(number(state, "nvlink_down") & ((1 << links) - 1)).count("1")
    return (links - down) / float(links)


def speed(state):
    return min(1.0, number(state, "perf_permille", 1000) / 1000.0)


def peak_busbw(states):
    shares = [links_up_share(state) for state in states]
    if any(share is None for share in shares) or min(shares) <= 0:
        return PCIE_BUSBW * min(speed(state) for state in states)
    slowest = min(share * speed(state) for share, state in zip(shares, states, strict=True))
    return max(PCIE_BUSBW, NVLINK_BUSBW * slowest)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-b", "--minbytes", type=size, default=size("8M"))
    parser.add_argument("-e", "--maxbytes", type=size, default=size("1G"))
    parser.add_argument("-f", "--stepfactor", type=int, default=2)
    parser.add_argument("-g", "--ngpus", type=int, default=1)
    parser.add_argument("--state-dir", help="the node's fake NVML state directory")
    args = parser.parse_args(argv)
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename
    state_dir = args.state_dir or os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                               "gpus", node)
    states = read_gpus(state_dir, args.ngpus)
    count = len(states)
    print("# nThread 1 nGpus %d minBytes %d maxBytes %d step: %d(factor) warmup iters: 5 iters: 20 "
          "agg iters: 1 validation: 1 graph: 0" % (count, args.minbytes, args.maxbytes, args.stepfactor))
    print("#\n# Using devices")
    for gpu in range(count):
        print("#  Rank %2d Group  0 Pid %6d on %11s device %2d [0x%02x] NVIDIA H100 80GB HBM3"
              % (gpu, os.getpid(), node, gpu, 0x18 + gpu))
    lost = [gpu for gpu, state in enumerate(states) if flag(state, "lost")]
    if lost or count < 2:
        why = "'unhandled cuda error'" if lost else "'invalid usage' (a ring needs 2 GPUs or more)"
        print("%s: Test NCCL failure common.cu:1005 %s" % (node, why), flush=True)
        return 1
    wrong = sum(number(state, "ecc_dbe_volatile") for state in states)
    peak = peak_busbw(states)
    print("#\n#%62s%35s" % ("out-of-place", "in-place"))
    print("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
          "   busbw #wrong")
    print("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
          "  (GB/s)")
    figures = []
    current = args.minbytes
    while current <= args.maxbytes:
        busbw = peak * current / float(current + HALF_SIZE)
        algbw = busbw * count / (2.0 * (count - 1))
        time_us = current / (algbw * 1e3)
        bad = str(min(wrong, current // 4)) if wrong else "0"
        print("%12d  %12d     float     sum      -1  %7.1f  %6.2f  %6.2f  %5s  %7.1f  %6.2f  %6.2f  %5s"
              % (current, current // 4, time_us, algbw, busbw, bad, time_us, algbw, busbw, bad))
        figures += [busbw, busbw]
        current *= max(2, args.stepfactor)
    print("# Out of bounds values : %d %s" % (wrong and len(figures) // 2, "FAILED" if wrong else "OK"))
    print("# Avg bus bandwidth    : %g" % round(sum(figures) / len(figures), 3))
    print("#")
    return 0


if __name__ == "__main__":
    sys.exit(main())
