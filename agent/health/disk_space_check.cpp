#include "agent/health/disk_space_check.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <iterator>

#include <fmt/format.h>

#include "rendezvous/base/printable.h"

namespace dtrun::agent {

// `folder` as a word a user can paste after `df -h`: as it is when it is
// plain, else single-quoted (and printable: a control character is
// escaped, not sent to the terminal).
std::string shell_word(const std::string& folder) {
  bool plain = !folder.empty();
  for (char c : folder) {
    bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '/' || c == '.' || c == '_' || c == '-' || c == '+' || c == ',' || c == ':';
    if (!safe) plain = false;
  }
  if (plain) return folder;
  std::string quoted = "'";
  for (char c : folder) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += '\'';
  return printable(quoted);
}

std::string format_free_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024;
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  // "1 GiB", not "1.0 GiB".
  std::string number = fmt::format("{:.1f}", value);
  if (number.size() > 2 && number.compare(number.size() - 2, 2, ".0") == 0) {
    number.resize(number.size() - 2);
  }
  return number + " " + units[unit];
}

health_finding disk_space_finding(const std::string& folder,
                                  std::optional<std::uint64_t> free_bytes,
                                  const std::string& error, std::uint64_t min_free_bytes,
                                  bool gating) {
  health_finding finding;
  finding.check = "disk";
  finding.gating = gating;
  std::string check_by_hand = "check with: df -h " + shell_word(folder);
  if (!free_bytes) {
    finding.healthy = false;
    finding.reason = fmt::format("cannot read the free space under {}: {}; {}", printable(folder),
                                 error, check_by_hand);
  } else if (*free_bytes < min_free_bytes) {
    finding.healthy = false;
    finding.reason = fmt::format("only {} free under {} (the minimum is {}); {}",
                                 format_free_bytes(*free_bytes), printable(folder),
                                 format_free_bytes(min_free_bytes), check_by_hand);
  }
  return finding;
}

health_finding check_disk_space(const std::string& folder, std::uint64_t min_free_bytes,
                                bool gating) {
  struct statvfs fs {};
  if (::statvfs(folder.c_str(), &fs) != 0) {
    return disk_space_finding(folder, std::nullopt, std::strerror(errno), min_free_bytes, gating);
  }
  // f_bavail: what an unprivileged user may still write (the workers are
  // not root's reserve).
  std::uint64_t free_bytes = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
  return disk_space_finding(folder, free_bytes, "", min_free_bytes, gating);
}

}  // namespace dtrun::agent
