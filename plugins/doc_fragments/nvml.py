# Copyright: (c) 2026, gpufleet.resilience contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  library_path:
    description:
      - Path of a C(libnvidia-ml.so.1) to load before NVML starts, for a driver outside the loader
        path or the lab's fake NVML.
      - By default the dynamic loader finds C(libnvidia-ml.so.1) (C(LD_LIBRARY_PATH) is honoured).
    type: path
requirements:
  - nvidia-ml-py (pynvml) on the managed host
  - the NVIDIA driver's C(libnvidia-ml.so.1), or the lab's fake one
"""
