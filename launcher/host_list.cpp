#include "launcher/host_list.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "launcher/cli.h"
#include "launcher/number_parse.h"
#include "launcher/slurm_hostlist.h"

namespace dtrun::launcher {
namespace {

// Hostfiles are small; a bound keeps a wrong path (a disk image, /dev/zero)
// from being read whole.
constexpr std::size_t max_hostfile_bytes = 16 * 1024 * 1024;

std::string_view trim(std::string_view s) {
  const char* blanks = " \t\r";
  auto first = s.find_first_not_of(blanks);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(blanks) - first + 1);
}

// Characters a host name (or user@host) may hold: nothing the remote
// shell or ssh's option parser would read differently (a leading '-').
bool plausible_host(std::string_view host) {
  if (host.empty() || host.front() == '-' || host.front() == '@' || host.back() == '@') {
    return false;
  }
  for (char c : host) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_' || c == '@';
    if (!ok) return false;
  }
  return true;
}

// "node[01-02]" (maybe "user@node[01-02]") -> its hosts, each checked.
std::vector<std::string> expand(std::string_view spec, const std::string& where) {
  std::string user;
  std::string_view hosts = spec;
  if (auto at = spec.find('@'); at != std::string_view::npos) {
    user = std::string(spec.substr(0, at + 1));
    hosts = spec.substr(at + 1);
  }
  std::vector<std::string> out;
  try {
    for (auto& h : expand_hostlist(hosts)) out.push_back(user + h);
  } catch (const hostlist_error& e) {
    throw usage_error(fmt::format("{}: {}", where, e.what()));
  }
  for (const auto& h : out) {
    if (!plausible_host(h)) {
      throw usage_error(fmt::format(
          "{}: '{}' is not a host name (letters, digits, '-', '.', '_', optionally user@)", where,
          h));
    }
  }
  return out;
}

int parse_slots(std::string_view text, const std::string& where) {
  return static_cast<int>(
      parse_integer(text, fmt::format("{}: slots", where), 1, max_nproc_per_node));
}

void add_unique(std::vector<host_entry>& hosts, std::set<std::string>& seen,
                std::vector<std::string> names, std::optional<int> slots,
                const std::string& where) {
  for (auto& name : names) {
    if (!seen.insert(name).second) {
      throw usage_error(fmt::format(
          "{}: host '{}' is listed twice; list each host once and give it slots for more "
          "workers",
          where, name));
    }
    hosts.push_back({std::move(name), slots});
  }
}

}  // namespace

std::string host_entry::address() const {
  auto at = target.find('@');
  return at == std::string::npos ? target : target.substr(at + 1);
}

std::vector<host_entry> parse_hosts_flag(std::string_view text) {
  const std::string where = "--hosts";
  if (trim(text).empty()) {
    throw usage_error("--hosts: the list is empty; give host[:slots],host[:slots],...");
  }
  std::vector<host_entry> hosts;
  std::set<std::string> seen;
  std::vector<std::string_view> entries;
  try {
    entries = split_hostlist(text);
  } catch (const hostlist_error& e) {
    throw usage_error(fmt::format("{}: {}", where, e.what()));
  }
  for (std::string_view entry : entries) {
    entry = trim(entry);
    if (entry.empty()) {
      throw usage_error(fmt::format("--hosts: '{}' has an empty entry; give host[:slots],...",
                                    text));
    }
    std::optional<int> slots;
    // The slots follow the last ':' outside brackets (none may be inside).
    if (auto colon = entry.rfind(':'); colon != std::string_view::npos &&
                                       entry.find(']', colon) == std::string_view::npos) {
      slots = parse_slots(entry.substr(colon + 1), fmt::format("--hosts '{}'", entry));
      entry = entry.substr(0, colon);
    }
    add_unique(hosts, seen, expand(entry, where), slots, where);
  }
  return hosts;
}

std::vector<host_entry> parse_hostfile(std::string_view text, const std::string& name) {
  std::vector<host_entry> hosts;
  std::set<std::string> seen;
  std::istringstream in{std::string(text)};
  std::string raw;
  for (int number = 1; std::getline(in, raw); ++number) {
    std::string where = fmt::format("hostfile {} line {}", name, number);
    std::string_view line = raw;
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::istringstream words{std::string(line)};
    std::string host;
    words >> host;
    std::optional<int> slots;
    for (std::string word; words >> word;) {
      auto eq = word.find('=');
      std::string key = word.substr(0, eq);
      if (eq == std::string::npos) {
        throw usage_error(fmt::format("{}: '{}' is not key=value; write 'host slots=N'", where,
                                      word));
      }
      std::string value = word.substr(eq + 1);
      if (key == "slots") {
        slots = parse_slots(value, where);
      } else if (key == "max_slots" || key == "max-slots") {
        parse_slots(value, where);  // MPI's upper bound: checked, then not needed
      } else {
        throw usage_error(fmt::format("{}: unknown key '{}'; only slots=N is understood", where,
                                      key));
      }
    }
    add_unique(hosts, seen, expand(host, where), slots, where);
  }
  if (hosts.empty()) {
    throw usage_error(fmt::format("hostfile {} lists no hosts; write one 'host slots=N' per line",
                                  name));
  }
  return hosts;
}

std::vector<host_entry> read_hostfile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    throw usage_error(fmt::format("--hostfile: cannot read '{}': {}", path, std::strerror(errno)));
  }
  std::string text;
  char buffer[65536];
  while (file.read(buffer, sizeof buffer) || file.gcount() > 0) {
    text.append(buffer, static_cast<std::size_t>(file.gcount()));
    if (text.size() > max_hostfile_bytes) {
      throw usage_error(fmt::format("--hostfile: '{}' is over {} MiB; is it a hostfile?", path,
                                    max_hostfile_bytes >> 20));
    }
  }
  if (file.bad()) {
    throw usage_error(fmt::format("--hostfile: cannot read '{}': {}", path, std::strerror(errno)));
  }
  return parse_hostfile(text, path);
}

}  // namespace dtrun::launcher
