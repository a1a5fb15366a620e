#include "launcher/config/installed_python.h"

#include <unistd.h>

#include <system_error>

namespace dtrun::launcher {

std::string python_beside(const std::filesystem::path& executable) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path bin = executable.parent_path();
  fs::path env = bin.parent_path();
  if (!fs::is_regular_file(env / "pyvenv.cfg", ec) && !fs::is_directory(env / "conda-meta", ec)) {
    return "";
  }
  for (const char* name : {"python3", "python"}) {
    fs::path python = bin / name;
    // is_regular_file follows the venv's symlink to the base interpreter.
    if (fs::is_regular_file(python, ec) && ::access(python.c_str(), X_OK) == 0) {
      return python.string();
    }
  }
  return "";
}

std::string python_beside_this_program() {
  std::error_code ec;
  // /proc/self/exe: the file that was executed (pip copies dtrun into
  // <env>/bin, so this is that copy, not a link target elsewhere).
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : python_beside(self);
}

}  // namespace dtrun::launcher
