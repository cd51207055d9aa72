// The go-nvml probe of tools/fake-nvml (tests/integration/fake_nvml/test_go_nvml.py builds it).
module gpufleet.local/go-nvml-probe

go 1.26

require github.com/NVIDIA/go-nvml v0.13.4-1
