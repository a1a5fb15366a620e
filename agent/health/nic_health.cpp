#include "agent/health/nic_health.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "rendezvous/base/parse_whole.h"
#include "rendezvous/base/printable.h"
#include "rendezvous/base/trim.h"

namespace dtrun::agent {
namespace fs = std::filesystem;

namespace {

// A sysfs file's first line, trimmed; nullopt when it cannot be read (a
// counter some drivers do not have).
std::optional<std::string> read_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return std::string(trim(line));
}

std::optional<std::uint64_t> read_counter(const fs::path& file) {
  auto text = read_line(file);
  if (!text) return std::nullopt;
  return parse_whole<std::uint64_t>(*text);
}

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::string_view trimmed = trim(item);
    if (!trimmed.empty()) items.emplace_back(trimmed);
  }
  return items;
}

// The names of a folder's entries, sorted (a missing folder: none).
std::vector<std::string> entries(const fs::path& folder) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string env_value(const env_map& env, const char* name) {
  auto found = env.find(name);
  return found == env.end() ? std::string() : found->second;
}

bool port_is_active(const ib_port& p) {
  return p.state.find("ACTIVE") != std::string::npos;
}

std::string port_kind(const ib_port& p) {
  return p.link_layer == "Ethernet" ? "RoCE" : "InfiniBand";
}

// Up: "up", or "unknown" with a carrier (loopback and some virtual
// interfaces never say "up").
bool link_is_up(const net_link& l) {
  return l.present && (l.operstate == "up" || (l.operstate == "unknown" && l.carrier));
}

health_finding problem(std::string reason, bool gating) {
  health_finding f;
  f.check = "nic";
  f.healthy = false;
  f.gating = gating;
  f.reason = std::move(reason);
  return f;
}

}  // namespace

bool nccl_list_selects(const std::string& list, const std::string& name, const std::string& port) {
  std::string_view rest = trim(list);
  if (rest.empty()) return true;
  bool exclude = !rest.empty() && rest.front() == '^';
  if (exclude) rest.remove_prefix(1);
  bool exact = !rest.empty() && rest.front() == '=';
  if (exact) rest.remove_prefix(1);
  bool named = false;
  for (const auto& item : split_commas(std::string(rest))) {
    std::string want = item;
    std::string want_port;
    if (auto colon = item.find(':'); colon != std::string::npos) {
      want = item.substr(0, colon);
      want_port = item.substr(colon + 1);
    }
    bool name_matches = exact ? name == want : name.rfind(want, 0) == 0;
    bool port_matches = want_port.empty() || port.empty() || want_port == port;
    if (name_matches && port_matches) named = true;
  }
  return exclude ? !named : named;
}

std::vector<std::string> socket_interfaces(const std::string& sysfs_root, const env_map& env,
                                           const std::string& routed) {
  std::vector<std::string> chosen;
  auto present = entries(fs::path(sysfs_root) / "class" / "net");
  for (const char* variable : {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    std::string list = env_value(env, variable);
    std::string_view given = trim(list);
    if (given.empty() || given.front() == '^') continue;
    // gloo takes exact names; NCCL prefixes unless told `=`.
    bool exact = std::string_view(variable) == "GLOO_SOCKET_IFNAME" || given.front() == '=';
    std::string names(given.front() == '=' ? given.substr(1) : given);
    for (const auto& want : split_commas(names)) {
      bool matched = false;
      for (const auto& name : present) {
        if (exact ? name == want : name.rfind(want, 0) == 0) {
          matched = true;
          if (std::find(chosen.begin(), chosen.end(), name) == chosen.end()) chosen.push_back(name);
        }
      }
      if (!matched && std::find(chosen.begin(), chosen.end(), want) == chosen.end()) {
        chosen.push_back(want);  // read as missing: the workers would fail to find it
      }
    }
  }
  if (chosen.empty() && !routed.empty()) chosen.push_back(routed);
  return chosen;
}

std::string route_interface(const std::string& address) {
  sockaddr_storage target{};
  socklen_t length = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&target);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&target);
  if (::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(9);  // any port: connect() on UDP sends nothing
    length = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(9);
    length = sizeof(sockaddr_in6);
  } else {
    return {};
  }
  int fd = ::socket(target.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  sockaddr_storage local{};
  socklen_t local_length = sizeof(local);
  bool routed = ::connect(fd, reinterpret_cast<sockaddr*>(&target), length) == 0 &&
                ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) == 0;
  ::close(fd);
  if (!routed) return {};
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  std::string name;
  for (ifaddrs* a = list; a != nullptr && name.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != local.ss_family) continue;
    bool same = local.ss_family == AF_INET
                    ? reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr ==
                          reinterpret_cast<sockaddr_in*>(&local)->sin_addr.s_addr
                    : std::memcmp(&reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr,
                                  &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr,
                                  sizeof(in6_addr)) == 0;
    if (same) name = a->ifa_name;
  }
  ::freeifaddrs(list);
  return name;
}

nic_snapshot read_nic_snapshot(const std::string& sysfs_root, const std::string& ib_hca,
                               const std::vector<std::string>& interfaces) {
  nic_snapshot snapshot;
  fs::path ib = fs::path(sysfs_root) / "class" / "infiniband";
  for (const auto& device : entries(ib)) {
    for (const auto& port : entries(ib / device / "ports")) {
      if (!nccl_list_selects(ib_hca, device, port)) continue;
      fs::path dir = ib / device / "ports" / port;
      ib_port p;
      p.device = device;
      p.port = port;
      p.state = read_line(dir / "state").value_or("unreadable");
      p.link_layer = read_line(dir / "link_layer").value_or("InfiniBand");
      p.link_downed = read_counter(dir / "counters" / "link_downed");
      snapshot.ports.push_back(std::move(p));
    }
  }
  for (const auto& name : interfaces) {
    fs::path dir = fs::path(sysfs_root) / "class" / "net" / name;
    net_link l;
    l.name = name;
    std::error_code ec;
    l.present = fs::exists(dir, ec);
    if (l.present) {
      l.operstate = read_line(dir / "operstate").value_or("unreadable");
      // Reading `carrier` of an interface that is down fails (EINVAL).
      l.carrier = read_line(dir / "carrier").value_or("0") == "1";
      l.carrier_changes = read_counter(dir / "carrier_changes");
    }
    snapshot.links.push_back(std::move(l));
  }
  return snapshot;
}

std::vector<health_finding> nic_health::judge(const nic_snapshot& now, bool gating) {
  std::vector<health_finding> found;
  std::set<std::string> reported;
  std::map<std::string, std::uint64_t> counters;
  // A lasting problem (`key`) is said once; a counter's rise is news each time.
  auto lasting = [&](const std::string& key, std::string reason) {
    health_finding f = problem(std::move(reason), gating);
    f.repeated = reported_.count(key) > 0;
    reported.insert(key);
    found.push_back(std::move(f));
  };
  auto rose = [&](const std::string& key, std::optional<std::uint64_t> value) {
    std::optional<std::uint64_t> before;
    if (auto it = counters_.find(key); it != counters_.end()) before = it->second;
    if (value) counters[key] = *value;
    using rise = std::optional<std::pair<std::uint64_t, std::uint64_t>>;
    if (value && before && *value > *before) return rise(std::make_pair(*before, *value));
    return rise();
  };
  for (const auto& p : now.ports) {
    std::string key = fmt::format("port {}/{}", p.device, p.port);
    std::string by_hand = fmt::format("check with: ibstat {} {}", p.device, p.port);
    if (!port_is_active(p)) {
      lasting(key, fmt::format("{} port {}/{} is not ACTIVE (state \"{}\"); {}",
                               port_kind(p), printable(p.device), printable(p.port),
                               printable(p.state), by_hand));
    }
    if (auto change = rose(key, p.link_downed)) {
      found.push_back(problem(
          fmt::format("{} port {}/{}: link_downed rose from {} to {} since the last check "
                      "(the link went down and came back: a cable or switch port flapping); {}",
                      port_kind(p), printable(p.device), printable(p.port), change->first,
                      change->second, by_hand),
          gating));
    }
  }
  for (const auto& l : now.links) {
    std::string shown = printable(l.name);
    std::string by_hand = fmt::format("check with: ip -s link show {}", shown);
    if (!l.present) {
      lasting(l.name, fmt::format("network interface {} (the workers' socket interface) does "
                                  "not exist; check with: ip link",
                                  shown));
      continue;
    }
    if (!link_is_up(l)) {
      lasting(l.name, fmt::format("network interface {} (the workers' socket interface) is down "
                                  "(operstate \"{}\"); {}",
                                  shown, printable(l.operstate), by_hand));
    }
    if (auto change = rose(l.name, l.carrier_changes)) {
      found.push_back(problem(
          fmt::format("network interface {}: carrier_changes rose from {} to {} since the last "
                      "check (its link went down and came back); {}",
                      shown, change->first, change->second, by_hand),
          gating));
    }
  }
  counters_ = std::move(counters);
  reported_ = std::move(reported);
  if (found.empty()) {
    health_finding healthy;
    healthy.check = "nic";
    healthy.gating = gating;
    found.push_back(std::move(healthy));
  }
  return found;
}

}  // namespace dtrun::agent
