#include "agent/monitor/control_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

namespace dtrun::agent {

std::optional<std::string> unsafe_dir_reason(const std::string& path, uid_t uid) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return fmt::format("{}: {}", path, std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a directory", path);
  if (st.st_uid != uid) {
    return fmt::format("{} belongs to uid {}, not to us (uid {})", path, st.st_uid, uid);
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return fmt::format("{} is writable by group or others (mode {:o}); chmod 700 it", path,
                       st.st_mode & 07777);
  }
  return std::nullopt;
}

namespace {

control_dir_result make_and_check(const std::string& dir, bool create, uid_t uid) {
  if (create && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return {std::nullopt, fmt::format("cannot create {}: {}", dir, std::strerror(errno))};
  }
  if (auto why = unsafe_dir_reason(dir, uid)) return {std::nullopt, *why};
  return {dir, {}};
}

}  // namespace

control_dir_result find_control_dir(const std::optional<std::string>& xdg_runtime_dir, bool create,
                                    uid_t uid, const std::string& tmp) {
  // XDG_RUNTIME_DIR only when it is ours (systemd makes it 0700 per user);
  // an unusable one falls back to /tmp rather than disabling the socket.
  if (xdg_runtime_dir && !xdg_runtime_dir->empty() && (*xdg_runtime_dir)[0] == '/' &&
      !unsafe_dir_reason(*xdg_runtime_dir, uid)) {
    auto found = make_and_check(*xdg_runtime_dir + "/dtrun", create, uid);
    if (found.path) return found;
  }
  return make_and_check(fmt::format("{}/dtrun-{}", tmp, uid), create, uid);
}

control_dir_result find_control_dir(bool create) {
  const char* chosen = std::getenv("DTRUN_CONTROL_DIR");
  if (chosen != nullptr && *chosen != '\0') return make_and_check(chosen, create, ::getuid());
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  return find_control_dir(xdg ? std::optional<std::string>(xdg) : std::nullopt, create, ::getuid());
}

}  // namespace dtrun::agent

namespace dtrun::agent {

std::vector<std::string> control_dirs_to_search() {
  const char* chosen = std::getenv("DTRUN_CONTROL_DIR");
  if (chosen != nullptr && *chosen != '\0') {
    auto found = find_control_dir(/*create=*/false);
    return found.path ? std::vector<std::string>{*found.path} : std::vector<std::string>{};
  }
  std::vector<std::string> dirs;
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && *xdg == '/') {
    std::string dir = std::string(xdg) + "/dtrun";
    if (!unsafe_dir_reason(dir, ::getuid())) dirs.push_back(dir);
  }
  std::string tmp = fmt::format("/tmp/dtrun-{}", ::getuid());
  if (!unsafe_dir_reason(tmp, ::getuid())) dirs.push_back(tmp);
  return dirs;
}

}  // namespace dtrun::agent
