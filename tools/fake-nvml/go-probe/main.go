// Copyright: (c) 2026, gpufleet.resilience contributors
// Apache License 2.0 (see LICENSE)

// go-nvml-probe: what an NVML consumer built on NVIDIA's Go binding (the device plugin, GPUd,
// dcgm-exporter) does first, against whatever libnvidia-ml.so.1 the loader finds. It initialises
// NVML, lists the GPUs, registers XID events on all of them and waits for one, printing one JSON
// object a line:
//
//	{"event":"init","driver":"...","cuda_driver":13000,"count":8}
//	{"event":"gpu","index":0,"name":"...","uuid":"GPU-...","pci_bus_id":"...","cc":"9.0",...}
//	{"event":"waiting"}
//	{"event":"xid","index":0,"uuid":"GPU-...","xid":79}       or {"event":"timeout"}
//
// Exit status: 0 when an XID arrived, 3 on timeout, 1 when an NVML call failed.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func emit(fields map[string]any) {
	line, _ := json.Marshal(fields)
	fmt.Println(string(line))
}

func fail(what string, ret nvml.Return) {
	emit(map[string]any{"event": "error", "call": what, "code": int(ret), "error": nvml.ErrorString(ret)})
	os.Exit(1)
}

func cString(b [32]int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func main() {
	timeoutMs := flag.Uint("timeout-ms", 10000, "how long to wait for an XID event")
	flag.Parse()

	if ret := nvml.Init(); ret != nvml.SUCCESS {
		fail("Init", ret)
	}
	defer nvml.Shutdown()

	driver, ret := nvml.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		fail("SystemGetDriverVersion", ret)
	}
	cuda, ret := nvml.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		fail("SystemGetCudaDriverVersion", ret)
	}
	count, ret := nvml.DeviceGetCount()
	if ret != nvml.SUCCESS {
		fail("DeviceGetCount", ret)
	}
	emit(map[string]any{"event": "init", "driver": driver, "cuda_driver": cuda, "count": count})

	set, ret := nvml.EventSetCreate()
	if ret != nvml.SUCCESS {
		fail("EventSetCreate", ret)
	}
	defer set.Free()

	for i := 0; i < count; i++ {
		dev, ret := nvml.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			fail("DeviceGetHandleByIndex", ret)
		}
		name, ret := dev.GetName()
		if ret != nvml.SUCCESS {
			fail("GetName", ret)
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			fail("GetUUID", ret)
		}
		pci, ret := dev.GetPciInfo()
		if ret != nvml.SUCCESS {
			fail("GetPciInfo", ret)
		}
		major, minor, ret := dev.GetCudaComputeCapability()
		if ret != nvml.SUCCESS {
			fail("GetCudaComputeCapability", ret)
		}
		mem, ret := dev.GetMemoryInfo()
		if ret != nvml.SUCCESS {
			fail("GetMemoryInfo", ret)
		}
		arch, ret := dev.GetArchitecture()
		if ret != nvml.SUCCESS {
			fail("GetArchitecture", ret)
		}
		brand, ret := dev.GetBrand()
		if ret != nvml.SUCCESS {
			fail("GetBrand", ret)
		}
		serial, ret := dev.GetSerial()
		if ret != nvml.SUCCESS {
			fail("GetSerial", ret)
		}
		part, ret := dev.GetBoardPartNumber()
		if ret != nvml.SUCCESS {
			fail("GetBoardPartNumber", ret)
		}
		minorNumber, ret := dev.GetMinorNumber()
		if ret != nvml.SUCCESS {
			fail("GetMinorNumber", ret)
		}
		isMig, ret := dev.IsMigDeviceHandle()
		if ret != nvml.SUCCESS {
			fail("IsMigDeviceHandle", ret)
		}
		// MIG is not simulated: a consumer must get NOT_SUPPORTED here, not a crash.
		_, _, migRet := dev.GetMigMode()
		emit(map[string]any{
			"event": "gpu", "index": i, "name": name, "uuid": uuid, "pci_bus_id": cString(pci.BusId),
			"pci_device_id": pci.PciDeviceId, "cc": fmt.Sprintf("%d.%d", major, minor),
			"memory_total": mem.Total, "memory_used": mem.Used, "architecture": int(arch),
			"brand": int(brand), "serial": serial, "board_part_number": part, "minor_number": minorNumber,
			"is_mig_device": isMig, "mig_mode": nvml.ErrorString(migRet),
		})
		if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			fail("RegisterEvents", ret)
		}
	}

	emit(map[string]any{"event": "waiting"})
	data, ret := nvml.EventSetWait(set, uint32(*timeoutMs))
	if ret == nvml.ERROR_TIMEOUT {
		emit(map[string]any{"event": "timeout"})
		os.Exit(3)
	}
	if ret != nvml.SUCCESS {
		fail("EventSetWait", ret)
	}
	index, ret := data.Device.GetIndex()
	if ret != nvml.SUCCESS {
		fail("GetIndex", ret)
	}
	uuid, ret := data.Device.GetUUID()
	if ret != nvml.SUCCESS {
		fail("GetUUID", ret)
	}
	emit(map[string]any{
		"event": "xid", "index": index, "uuid": uuid, "xid": data.EventData, "event_type": data.EventType,
	})
}
