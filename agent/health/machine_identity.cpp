#include "agent/health/machine_identity.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "agent/health/gpu_health.h"

namespace dtrun::agent {

namespace {

constexpr std::size_t key_part_length = 12;

std::string trimmed(const std::string& text) {
  auto first = std::find_if_not(text.begin(), text.end(),
                                [](unsigned char c) { return std::isspace(c); });
  auto last = std::find_if_not(text.rbegin(), text.rend(),
                               [](unsigned char c) { return std::isspace(c); })
                  .base();
  return first < last ? std::string(first, last) : std::string();
}

// FNV-1a 64: stable across builds and machines (std::hash is not).
std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace

machine_identity make_machine_identity(const std::string& machine_id,
                                       std::vector<std::string> gpu_uuids,
                                       const std::string& host_name) {
  machine_identity id;
  id.machine_id = trimmed(machine_id);
  std::sort(gpu_uuids.begin(), gpu_uuids.end());
  gpu_uuids.erase(std::unique(gpu_uuids.begin(), gpu_uuids.end()), gpu_uuids.end());
  id.gpu_uuids = std::move(gpu_uuids);
  if (!id.machine_id.empty()) {
    auto prefix = id.machine_id.substr(0, key_part_length);
    id.key = prefix;
    id.label = fmt::format("{} (machine {})", host_name, prefix);
  } else {
    id.key = "host-" + host_name;
    id.label = fmt::format("{} (no machine-id: known by host name)", host_name);
  }
  if (!id.gpu_uuids.empty()) {
    std::string joined;
    for (const auto& uuid : id.gpu_uuids) joined += (joined.empty() ? "" : ",") + uuid;
    id.key += ":" + fmt::format("{:016x}", fnv1a(joined)).substr(0, key_part_length);
  }
  return id;
}

std::string read_machine_id(const std::vector<std::string>& paths) {
  for (const auto& path : paths) {
    std::ifstream in(path);
    if (!in) continue;
    // A machine-id is 32 hex digits and a newline; read a bounded amount.
    std::string text(256, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(in.gcount()));
    if (auto id = trimmed(text); !id.empty()) return id;
  }
  return {};
}

std::vector<std::string> nvml_gpu_uuids(nvml_session& nvml) {
  std::vector<std::string> uuids;
  for (const auto& gpu : nvml_gpus(nvml)) {
    if (!gpu.uuid.empty()) uuids.push_back(gpu.uuid);
  }
  return uuids;
}

machine_identity this_machine_identity(nvml_session& nvml) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return make_machine_identity(read_machine_id(), nvml_gpu_uuids(nvml), host);
}

}  // namespace dtrun::agent
