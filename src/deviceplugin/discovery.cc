#include "src/deviceplugin/discovery.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <system_error>

namespace hyperslice::deviceplugin {
namespace {

namespace fs = std::filesystem;

// "<prefix><digits>" -> digits as int.
std::optional<int> NumberAfter(std::string_view name, std::string_view prefix) {
  if (name.size() <= prefix.size() || name.substr(0, prefix.size()) != prefix) return std::nullopt;
  std::string_view digits = name.substr(prefix.size());
  int value = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || value < 0) return std::nullopt;
  return value;
}

std::string ReadTrimmed(const fs::path& path) {
  std::ifstream in(path);
  std::string s;
  if (!in || !std::getline(in, s)) return {};
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

int ReadNumaNode(const fs::path& device_dir) {
  std::string s = ReadTrimmed(device_dir / "numa_node");
  int value = -1;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || value < 0) return -1;
  return value;
}

fs::path Under(const std::string& root, std::string_view node_path) {
  // node_path is absolute ("/dev/accel0"); join it below root.
  return fs::path(root) / fs::path(node_path).relative_path();
}

struct TpuPciFunction {
  std::string address;
  int numa_node = -1;
  std::optional<int> iommu_group;
};

// TPU PCI functions in address order.
std::vector<TpuPciFunction> ScanPci(const std::string& root) {
  std::vector<TpuPciFunction> out;
  std::error_code ec;
  fs::path devices = Under(root, "/sys/bus/pci/devices");
  for (const auto& entry : fs::directory_iterator(devices, ec)) {
    if (ReadTrimmed(entry.path() / "vendor") != kTpuPciVendor) continue;
    TpuPciFunction fn;
    fn.address = entry.path().filename().string();
    fn.numa_node = ReadNumaNode(entry.path());
    std::error_code link_ec;
    fs::path group = fs::read_symlink(entry.path() / "iommu_group", link_ec);
    if (!link_ec) fn.iommu_group = NumberAfter(group.filename().string(), "");
    out.push_back(std::move(fn));
  }
  std::sort(out.begin(), out.end(),
            [](const TpuPciFunction& a, const TpuPciFunction& b) { return a.address < b.address; });
  return out;
}

std::vector<Chip> DiscoverAccel(const std::string& root) {
  std::vector<Chip> chips;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(Under(root, "/dev"), ec)) {
    std::string name = entry.path().filename().string();
    std::optional<int> n = NumberAfter(name, "accel");
    if (!n) continue;
    std::error_code type_ec;
    if (entry.is_directory(type_ec)) continue;
    Chip chip;
    chip.id = name;
    chip.index = *n;
    chip.device_paths = {"/dev/" + name};
    fs::path sys_device = Under(root, "/sys/class/accel") / name / "device";
    chip.numa_node = ReadNumaNode(sys_device);
    std::error_code canon_ec;
    fs::path resolved = fs::canonical(sys_device, canon_ec);
    if (!canon_ec) chip.pci_address = resolved.filename().string();
    chips.push_back(std::move(chip));
  }
  std::sort(chips.begin(), chips.end(),
            [](const Chip& a, const Chip& b) { return a.index < b.index; });
  return chips;
}

std::vector<Chip> DiscoverVfio(const std::string& root) {
  std::vector<Chip> chips;
  std::map<int, bool> groups_seen;
  for (const TpuPciFunction& fn : ScanPci(root)) {
    if (!fn.iommu_group || groups_seen[*fn.iommu_group]) continue;
    groups_seen[*fn.iommu_group] = true;
    Chip chip;
    chip.id = "vfio" + std::to_string(*fn.iommu_group);
    chip.index = static_cast<int>(chips.size());
    chip.numa_node = fn.numa_node;
    chip.pci_address = fn.address;
    chip.device_paths = {"/dev/vfio/" + std::to_string(*fn.iommu_group)};
    chips.push_back(std::move(chip));
  }
  return chips;
}

}  // namespace

Result<Mode> ParseMode(std::string_view name) {
  if (name == "auto") return Mode::kAuto;
  if (name == "accel") return Mode::kAccel;
  if (name == "vfio") return Mode::kVfio;
  return Error::Make(
      Error::Code::kInvalidArgument,
      "unknown discovery mode \"" + std::string(name) + "\"; use auto, accel or vfio");
}

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kAuto:
      return "auto";
    case Mode::kAccel:
      return "accel";
    case Mode::kVfio:
      return "vfio";
  }
  return "auto";
}

Result<Inventory> Discover(const std::string& root, Mode mode) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return Error::Make(Error::Code::kInvalidArgument,
                       "discovery root \"" + root + "\" is not a readable directory");
  }
  Inventory inv;
  if (mode == Mode::kAccel || mode == Mode::kAuto) {
    inv.chips = DiscoverAccel(root);
    if (!inv.chips.empty() || mode == Mode::kAccel) {
      inv.mode = Mode::kAccel;
      return inv;
    }
  }
  inv.chips = DiscoverVfio(root);
  inv.mode = (!inv.chips.empty() || mode == Mode::kVfio) ? Mode::kVfio : Mode::kAuto;
  return inv;
}

bool ProbeHealthy(const std::string& root, const Chip& chip, Mode mode) {
  for (const std::string& node : chip.device_paths) {
    std::string path = Under(root, node).string();
    std::error_code ec;
    if (fs::is_directory(path, ec)) return false;
    if (mode == Mode::kVfio) {
      if (::access(path.c_str(), R_OK | W_OK) != 0) return false;
      continue;
    }
    int fd = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
      if (errno == EBUSY) continue;
      return false;
    }
    ::close(fd);
  }
  if (mode == Mode::kVfio && ::access(Under(root, kVfioContainerPath).c_str(), R_OK | W_OK) != 0) {
    return false;
  }
  return !chip.device_paths.empty();
}

}  // namespace hyperslice::deviceplugin
