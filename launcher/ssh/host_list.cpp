#include "launcher/ssh/host_list.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "launcher/schedulers/slurm_hostlist.h"
#include "rendezvous/base/number_parse.h"
#include "rendezvous/base/printable.h"
#include "rendezvous/base/trim.h"
#include "rendezvous/base/usage_error.h"

namespace dtrun::launcher {
namespace {

// Blanks around hostfile words and --hosts entries (a CRLF file's '\r'
// included).
constexpr std::string_view host_blanks = " \t\r";

// Characters a host name (or user@host) may hold: nothing the remote
// shell or ssh's option parser would read differently (a leading '-').
bool plausible_host(std::string_view host) {
  if (host.empty() || host.front() == '-' || host.front() == '@' || host.back() == '@') {
    return false;
  }
  // One '@' at most: ssh splits user@host at the last one, host_entry's
  // address() at the first, and the two must name the same machine.
  if (std::count(host.begin(), host.end(), '@') > 1) return false;
  for (char c : host) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '.' || c == '_' || c == '@';
    if (!ok) return false;
  }
  return true;
}

// "node[01-02]" (maybe "user@node[01-02]") -> its hosts, each checked;
// `room` more hosts fit in the list. The text is the user's: printable_excerpt()
// in messages, so a NUL or an escape sequence shows as \x00, \x1b.
std::vector<std::string> expand(std::string_view spec, const std::string& where,
                                std::size_t room) {
  std::string user;
  std::string_view hosts = spec;
  if (auto at = spec.find('@'); at != std::string_view::npos) {
    user = std::string(spec.substr(0, at + 1));
    hosts = spec.substr(at + 1);
  }
  std::vector<std::string> out;
  try {
    for (auto& h : expand_hostlist(hosts, room)) out.push_back(user + h);
  } catch (const hostlist_too_long&) {
    throw usage_error(fmt::format(
        "{}: more than {} hosts in all, the most --nnodes allows; list fewer hosts", where,
        max_hosts));
  } catch (const hostlist_error& e) {
    throw usage_error(fmt::format("{}: {}", where, printable(e.what())));
  }
  for (const auto& h : out) {
    if (!plausible_host(h)) {
      throw usage_error(fmt::format(
          "{}: '{}' is not a host name (letters, digits, '-', '.', '_', optionally user@)", where,
          printable_excerpt(h)));
    }
  }
  return out;
}

int parse_slots(std::string_view text, const std::string& where) {
  return static_cast<int>(
      parse_integer(text, fmt::format("{}: slots", where), 1, max_nproc_per_node));
}

// Adds the hosts of `spec`, each once, within max_hosts in all.
void add_unique(std::vector<host_entry>& hosts, std::set<std::string>& seen,
                std::string_view spec, std::optional<int> slots, const std::string& where) {
  for (auto& name : expand(spec, where, max_hosts - hosts.size())) {
    if (!seen.insert(name).second) {
      throw usage_error(fmt::format(
          "{}: host '{}' is listed twice; list each host once and give it slots for more "
          "workers",
          where, printable_excerpt(name)));
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
  if (trim(text, host_blanks).empty()) {
    throw usage_error("--hosts: the list is empty; give host[:slots],host[:slots],...");
  }
  std::vector<host_entry> hosts;
  std::set<std::string> seen;
  std::vector<std::string_view> entries;
  try {
    entries = split_hostlist(text);
  } catch (const hostlist_error& e) {
    throw usage_error(fmt::format("{}: {}", where, printable(e.what())));
  }
  for (std::string_view entry : entries) {
    entry = trim(entry, host_blanks);
    if (entry.empty()) {
      throw usage_error(fmt::format("--hosts: '{}' has an empty entry; give host[:slots],...",
                                    printable_excerpt(text)));
    }
    std::optional<int> slots;
    // The slots follow the last ':' outside brackets (none may be inside).
    if (auto colon = entry.rfind(':'); colon != std::string_view::npos &&
                                       entry.find(']', colon) == std::string_view::npos) {
      slots = parse_slots(entry.substr(colon + 1),
                          fmt::format("--hosts '{}'", printable_excerpt(entry)));
      entry = entry.substr(0, colon);
    }
    add_unique(hosts, seen, entry, slots, where);
  }
  return hosts;
}

std::vector<host_entry> parse_hostfile(std::string_view text, const std::string& name) {
  const std::string shown_name = printable_excerpt(name);
  if (text.size() > max_hostfile_bytes) {
    throw usage_error(fmt::format("hostfile {} is over {} MiB; is it a hostfile?", shown_name,
                                  max_hostfile_bytes >> 20));
  }
  std::vector<host_entry> hosts;
  std::set<std::string> seen;
  std::size_t number = 0;
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = std::min(text.find('\n', start), text.size());
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    // Blank and comment lines count too: the bound is on the work done.
    if (++number > max_hostfile_lines) {
      throw usage_error(fmt::format("hostfile {} has more than {} lines; is it a hostfile?",
                                    shown_name, max_hostfile_lines));
    }
    line = trim(line.substr(0, line.find('#')), host_blanks);
    if (line.empty()) continue;
    std::string where = fmt::format("hostfile {} line {}", shown_name, number);
    std::istringstream words{std::string(line)};
    std::string host;
    words >> host;
    std::optional<int> slots;
    std::set<std::string> keys;
    for (std::string word; words >> word;) {
      auto eq = word.find('=');
      std::string key = word.substr(0, eq);
      if (eq == std::string::npos) {
        throw usage_error(fmt::format("{}: '{}' is not key=value; write 'host slots=N'", where,
                                      printable_excerpt(word)));
      }
      std::string value = word.substr(eq + 1);
      bool known = key == "slots" || key == "max_slots" || key == "max-slots";
      if (!known) {
        throw usage_error(fmt::format("{}: unknown key '{}'; only slots=N is understood", where,
                                      printable_excerpt(key)));
      }
      // "slots=2 slots=3": which one was meant? (max_slots and max-slots
      // are one key.)
      if (!keys.insert(key == "slots" ? key : "max_slots").second) {
        throw usage_error(fmt::format("{}: {} is given twice; give it once", where, key));
      }
      if (key == "slots") {
        slots = parse_slots(value, where);
      } else {
        parse_slots(value, where);  // MPI's upper bound: checked, then not needed
      }
    }
    add_unique(hosts, seen, host, slots, where);
  }
  if (hosts.empty()) {
    throw usage_error(fmt::format("hostfile {} lists no hosts; write one 'host slots=N' per line",
                                  shown_name));
  }
  return hosts;
}

std::vector<host_entry> read_hostfile(const std::string& path) {
  const std::string shown = printable_excerpt(path);
  auto cannot_read = [&](int error) {
    return usage_error(
        fmt::format("--hostfile: cannot read '{}': {}", shown, std::strerror(error)));
  };
  // Non-blocking: opening a FIFO for reading would wait for a writer
  // forever. Only a regular file is read; the flag does nothing to it.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) throw cannot_read(errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int error = errno;
    ::close(fd);
    throw cannot_read(error);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw usage_error(fmt::format(
        "--hostfile: '{}' is not a regular file (a FIFO, device or folder); give a file with one "
        "'host slots=N' per line",
        shown));
  }
  std::string text;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int error = errno;
      ::close(fd);
      throw cannot_read(error);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > max_hostfile_bytes) {
      ::close(fd);
      throw usage_error(fmt::format("--hostfile: '{}' is over {} MiB; is it a hostfile?", shown,
                                    max_hostfile_bytes >> 20));
    }
  }
  ::close(fd);
  return parse_hostfile(text, path);
}

}  // namespace dtrun::launcher
