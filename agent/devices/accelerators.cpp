#include "agent/devices/accelerators.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "rendezvous/base/parse_whole.h"
#include "rendezvous/base/trim.h"

namespace fs = std::filesystem;

namespace dtrun::agent {
namespace {

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

// Python's str.split(","): "" gives one empty item.
std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (true) {
    std::size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma == std::string::npos ? std::string::npos
                                                                  : comma - start));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

// torch's _strtoul: an optional sign then the leading digits; -1 when
// there are none. Values beyond int are clamped (out of range anyway).
long long leading_ordinal(const std::string& s) {
  std::size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  std::size_t digits_start = i;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == digits_start) return -1;
  // Only too many digits fail here: clamped, as said.
  long long value = std::min<long long>(
      parse_whole<long long>(std::string_view(s).substr(digits_start, i - digits_start))
          .value_or(INT_MAX),
      INT_MAX);
  return negative ? -value : value;
}

bool all_digits(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) {
    return std::isdigit(c) != 0;
  });
}

std::string read_first_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return std::string(trim(line));
}

// "key value" lines (kfd's properties) or "KEY=value" lines (uevent).
std::map<std::string, std::string> read_pairs(const fs::path& path, char separator) {
  std::map<std::string, std::string> pairs;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto at = line.find(separator);
    if (at != std::string::npos) pairs[std::string(trim(line.substr(0, at)))] = std::string(trim(line.substr(at + 1)));
  }
  return pairs;
}

std::vector<fs::path> sorted_entries(const fs::path& dir) {
  std::vector<fs::path> entries;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) entries.push_back(entry.path());
  std::sort(entries.begin(), entries.end());
  return entries;
}

std::optional<std::string> env_value(const env_map& env, const char* name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

// NVIDIA: one folder per GPU, named by its PCI address. NVML (which torch
// counts with) numbers them in PCI bus order.
std::vector<accelerator> nvidia_devices(const fs::path& root) {
  std::vector<accelerator> devices;
  for (const auto& dir : sorted_entries(root / "proc/driver/nvidia/gpus")) {
    accelerator a;
    a.kind = accelerator_kind::cuda;
    a.physical_index = static_cast<int>(devices.size());
    a.pci_address = lower(dir.filename().string());
    auto info = read_pairs(dir / "information", ':');
    if (auto uuid = info.find("GPU UUID"); uuid != info.end()) a.uuid = uuid->second;
    devices.push_back(a);
  }
  return devices;
}

// AMD: the KFD topology lists CPUs and GPUs as nodes; GPUs have a non-zero
// gpu_id. location_id is bus << 8 | device << 3 | function.
std::vector<accelerator> amd_devices(const fs::path& root) {
  std::vector<std::pair<long, fs::path>> nodes;
  for (const auto& dir : sorted_entries(root / "sys/class/kfd/kfd/topology/nodes")) {
    std::string name = dir.filename().string();
    if (!all_digits(name) || name.size() > 9) continue;
    nodes.emplace_back(std::stol(name), dir);
  }
  std::sort(nodes.begin(), nodes.end());
  std::vector<accelerator> devices;
  for (const auto& [number, dir] : nodes) {
    std::string gpu_id = read_first_line(dir / "gpu_id");
    if (gpu_id.empty() || gpu_id == "0") continue;
    auto props = read_pairs(dir / "properties", ' ');
    accelerator a;
    a.kind = accelerator_kind::rocm;
    a.physical_index = static_cast<int>(devices.size());
    auto number_at = [&props](const std::string& key) -> std::optional<std::uint64_t> {
      auto it = props.find(key);
      return it == props.end() ? std::nullopt : parse_whole<std::uint64_t>(it->second);
    };
    auto domain = number_at("domain");
    auto location = number_at("location_id");
    if (domain && location) {
      a.pci_address = fmt::format("{:04x}:{:02x}:{:02x}.{:x}", *domain, (*location >> 8) & 0xff,
                                  (*location >> 3) & 0x1f, *location & 7);
    }  // else no address: the device still counts; it only cannot be placed.
    if (auto id = props.find("unique_id"); id != props.end() && id->second != "0") {
      if (auto unique = parse_whole<std::uint64_t>(id->second)) {
        a.uuid = fmt::format("{:016x}", *unique);
      }
    }
    devices.push_back(a);
  }
  return devices;
}

// Intel: a render node per GPU driven by i915 or xe, in PCI order.
std::vector<accelerator> intel_devices(const fs::path& root) {
  std::vector<std::string> addresses;
  for (const auto& dir : sorted_entries(root / "sys/class/drm")) {
    if (dir.filename().string().rfind("renderD", 0) != 0) continue;
    auto uevent = read_pairs(dir / "device/uevent", '=');
    auto driver = uevent.find("DRIVER");
    if (driver == uevent.end() || (driver->second != "i915" && driver->second != "xe")) continue;
    auto slot = uevent.find("PCI_SLOT_NAME");
    addresses.push_back(slot == uevent.end() ? "" : lower(slot->second));
  }
  std::sort(addresses.begin(), addresses.end());
  std::vector<accelerator> devices;
  for (const auto& address : addresses) {
    accelerator a;
    a.kind = accelerator_kind::xpu;
    a.physical_index = static_cast<int>(devices.size());
    a.pci_address = address;
    devices.push_back(a);
  }
  return devices;
}

// ZE_AFFINITY_MASK: "0,1" or "0.0,1.1" (sub-devices); a device is visible
// when any entry names it; Level Zero keeps the driver's order.
std::vector<accelerator> apply_ze_affinity_mask(const std::optional<std::string>& mask,
                                                const std::vector<accelerator>& devices) {
  if (!mask || trim(*mask).empty()) {
    std::vector<accelerator> all = devices;
    for (auto& a : all) a.selector = std::to_string(a.physical_index);
    return all;
  }
  std::map<int, std::string> named;
  for (const auto& entry : split_commas(*mask)) {
    std::string root_device(trim(entry.substr(0, entry.find('.'))));
    auto index = parse_whole<unsigned>(root_device);
    if (!index || root_device.size() > 6) continue;
    if (*index < devices.size()) named.emplace(static_cast<int>(*index), root_device);
  }
  std::vector<accelerator> visible;
  for (const auto& [index, text] : named) {
    visible.push_back(devices[static_cast<std::size_t>(index)]);
    visible.back().selector = text;
  }
  return visible;
}

}  // namespace

std::vector<accelerator> apply_visible_devices(const std::optional<std::string>& value,
                                               const std::vector<accelerator>& devices,
                                               bool strip_gpu_prefix) {
  std::vector<accelerator> visible;
  if (!value) {
    visible = devices;
    for (std::size_t i = 0; i < visible.size(); ++i) visible[i].selector = std::to_string(i);
    return visible;
  }
  const std::string& var = *value;
  if (var.rfind("GPU-", 0) == 0 || var.rfind("MIG-", 0) == 0) {
    std::string prefix = var.substr(0, 4);
    std::vector<std::string> entries;
    for (const auto& entry : split_commas(var)) {
      if (std::find(entries.begin(), entries.end(), entry) != entries.end()) return {};
      if (entry.rfind(prefix, 0) != 0) break;
      entries.push_back(entry);
    }
    std::set<std::size_t> taken;
    for (const auto& entry : entries) {
      if (prefix == "MIG-") {
        // A MIG instance is a device of its own that sysfs does not show;
        // CUDA checks it, torch counts it. No PCI address to place it by.
        accelerator a;
        a.physical_index = -1;
        a.selector = entry;
        visible.push_back(a);
        continue;
      }
      std::string candidate = strip_gpu_prefix ? entry.substr(4) : entry;
      std::optional<std::size_t> match;
      bool ambiguous = false;
      for (std::size_t i = 0; i < devices.size(); ++i) {
        if (devices[i].uuid.empty() || devices[i].uuid.rfind(candidate, 0) != 0) continue;
        ambiguous = match.has_value();
        match = i;
      }
      if (!match || ambiguous) break;  // the first invalid entry ends the list
      if (!taken.insert(*match).second) return {};  // a repeated device: none
      visible.push_back(devices[*match]);
      visible.back().selector = entry;
    }
    return visible;
  }
  std::vector<long long> ordinals;
  std::vector<std::string> texts;
  for (const auto& entry : split_commas(var)) {
    long long ordinal = leading_ordinal(std::string(trim(entry)));
    if (std::find(ordinals.begin(), ordinals.end(), ordinal) != ordinals.end()) return {};
    if (ordinal < 0) break;
    ordinals.push_back(ordinal);
    texts.push_back(std::to_string(ordinal));
  }
  for (std::size_t i = 0; i < ordinals.size(); ++i) {
    if (ordinals[i] >= static_cast<long long>(devices.size())) break;  // trimmed there
    visible.push_back(devices[static_cast<std::size_t>(ordinals[i])]);
    visible.back().selector = texts[i];
  }
  return visible;
}

accelerator_inventory discover_accelerators(const std::string& root, const env_map& env) {
  fs::path base(root.empty() ? "/" : root);
  accelerator_inventory inventory;
  inventory.cuda =
      apply_visible_devices(env_value(env, "CUDA_VISIBLE_DEVICES"), nvidia_devices(base));

  // ROCm: ROCR_VISIBLE_DEVICES narrows first; HIP_VISIBLE_DEVICES (or,
  // without either, CUDA_VISIBLE_DEVICES) then picks among what is left.
  std::vector<accelerator> amd = amd_devices(base);
  auto rocr = env_value(env, "ROCR_VISIBLE_DEVICES");
  auto hip = env_value(env, "HIP_VISIBLE_DEVICES");
  if (rocr) amd = apply_visible_devices(rocr, amd, true);
  auto hip_choice = hip ? hip : rocr ? std::nullopt : env_value(env, "CUDA_VISIBLE_DEVICES");
  std::vector<accelerator> amd_visible = apply_visible_devices(hip_choice, amd, true);
  if (rocr && !hip) {
    // The runtime renumbers; the selector is the device's new position.
    for (std::size_t i = 0; i < amd_visible.size(); ++i) {
      amd_visible[i].selector = std::to_string(i);
    }
  }
  inventory.rocm = amd_visible;

  inventory.xpu = apply_ze_affinity_mask(env_value(env, "ZE_AFFINITY_MASK"), intel_devices(base));
  return inventory;
}

std::vector<accelerator> visible_gpus(const std::string& root, const env_map& env) {
  return discover_accelerators(root, env).gpus();
}

std::optional<int> pci_numa_node(const std::string& root, const std::string& pci_address) {
  if (pci_address.empty()) return std::nullopt;
  fs::path path = fs::path(root.empty() ? "/" : root) / "sys/bus/pci/devices" / pci_address /
                  "numa_node";
  auto node = parse_whole<long>(read_first_line(path));  // "-1" without NUMA
  if (!node) return std::nullopt;
  return *node < 0 ? 0 : static_cast<int>(std::min<long>(*node, INT_MAX));
}

int usable_cpu_count() {
  // A set large enough for the machine: sched_getaffinity fails with
  // EINVAL while the kernel's CPU mask is larger than the set.
  for (int cpus = 1024; cpus <= (1 << 20); cpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(cpus);
    if (set == nullptr) break;
    std::size_t size = CPU_ALLOC_SIZE(cpus);
    int rc = ::sched_getaffinity(0, size, set);
    int saved_errno = errno;
    int n = rc == 0 ? CPU_COUNT_S(size, set) : 0;
    CPU_FREE(set);
    if (rc == 0 && n > 0) return n;
    if (rc == 0 || saved_errno != EINVAL) break;
  }
  long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : static_cast<int>(std::min<long>(n, INT_MAX));
}

const char* to_string(accelerator_kind kind) {
  switch (kind) {
    case accelerator_kind::cuda: return "cuda";
    case accelerator_kind::rocm: return "rocm";
    case accelerator_kind::xpu: return "xpu";
  }
  return "cuda";
}

}  // namespace dtrun::agent
