#include "agent/policy/run_folder.h"

#include <stdlib.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "rendezvous/base/printable.h"

namespace dtrun::agent {
namespace fs = std::filesystem;

namespace {

std::string safe_file_name(const std::string& text) {
  std::string out;
  for (char c : text) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    out += ok ? c : '_';
  }
  return out.empty() ? "run" : out;
}

std::string temp_base() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

}  // namespace

std::string make_run_dir(const std::string& log_dir, const std::string& run_id) {
  std::string base = log_dir.empty() ? temp_base() : log_dir;
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) {
    throw std::runtime_error(fmt::format("--log-dir: cannot create the folder {}: {}; give a "
                                         "folder you can write to",
                                         printable(base), ec.message()));
  }
  std::string pattern = (fs::path(base) / (safe_file_name(run_id) + "_XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(),
                            fmt::format("cannot create a run folder in {}", base));
  }
  return pattern;
}

}  // namespace dtrun::agent
