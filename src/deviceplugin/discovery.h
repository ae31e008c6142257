// Discovery of TPU chips on a node, from its device nodes and PCI sysfs.
//
// Everything is read under `root` (default "/"), so tests point it at a fake tree in a temp dir and
// a container that mounts the node elsewhere can point it there. Paths handed to kubelet
// (Chip::device_paths) are node paths ("/dev/accel0"), never prefixed with `root`.
//
// Two driver models:
//  - accel: one `/dev/accel<N>` character device per chip (the TPU "accel" driver); N is the chip
//    index. NUMA node from `/sys/class/accel/accel<N>/device/numa_node`.
//  - vfio: the chips are bound to vfio-pci; each TPU PCI function
//    (`/sys/bus/pci/devices/<bdf>/vendor` == 0x1ae0) has an IOMMU group G
//    (`.../iommu_group` -> `.../iommu_groups/G`) and the device node `/dev/vfio/G`. Chip indices
//    are the TPU functions in PCI address order; a group holding several TPU functions is one chip
//    (its first function). Every vfio allocation also needs the container node `/dev/vfio/vfio`.
//
// Pure functions of the filesystem; thread-compatible.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "src/base/result.h"

namespace hyperslice::deviceplugin {

enum class Mode { kAuto, kAccel, kVfio };

// "auto", "accel", "vfio".
Result<Mode> ParseMode(std::string_view name);
const char* ModeName(Mode mode);

inline constexpr std::string_view kTpuPciVendor = "0x1ae0";
inline constexpr std::string_view kVfioContainerPath = "/dev/vfio/vfio";

struct Chip {
  std::string id;           // device ID told to kubelet: "accel<N>" or "vfio<G>"
  int index = -1;           // chip index on the host, as TPU_VISIBLE_CHIPS counts them
  int numa_node = -1;       // -1 when the node has no NUMA information
  std::string pci_address;  // "0000:00:04.0" when known
  std::vector<std::string> device_paths;  // node paths this chip needs, e.g. {"/dev/accel0"}
};

struct Inventory {
  Mode mode = Mode::kAuto;  // the model found (kAccel or kVfio); kAuto when nothing was found
  std::vector<Chip> chips;  // ordered by index
};

// Scans `root` for chips of `mode` (kAuto: accel when any /dev/accel<N> exists, else vfio when any
// TPU PCI function has an IOMMU group). A node without chips is an empty inventory, not an error;
// an error means `root` itself is unusable.
//
// In accel mode a chip is found by its device node; in vfio mode by its PCI function, so a missing
// `/dev/vfio/G` leaves the chip in the inventory and ProbeHealthy reports it.
Result<Inventory> Discover(const std::string& root, Mode mode);

// Whether every device node of `chip` exists under `root` and can be used. accel nodes are opened
// (O_RDWR|O_NONBLOCK, closed at once; EBUSY — a container holds it — counts as healthy). vfio group
// nodes are only checked with access(R_OK|W_OK): a vfio group can be open only once, and opening it
// here could make a container's own open fail. In vfio mode /dev/vfio/vfio must be usable too.
bool ProbeHealthy(const std::string& root, const Chip& chip, Mode mode);

}  // namespace hyperslice::deviceplugin
