#include "launcher/ssh/ssh_host.h"

#include <utility>

#include <fmt/format.h>

#include "launcher/ssh/summary_merge.h"
#include "rendezvous/base/exit_codes.h"

namespace dtrun::launcher {

bool fanout_host::take_summary_line(std::string_view line) {
  if (is_summary_rule(line)) {
    if (!block) {
      block.emplace().emplace_back(line);
    } else {
      block->emplace_back(line);
      blocks.push_back(std::move(*block));
      block.reset();
    }
    return true;
  }
  if (!block) return false;
  block->emplace_back(line);
  return true;
}

std::string fanout_host::describe_failure(int code, const std::string& remote_dtrun) const {
  const std::string& target = launch.host.target;
  const std::string remote_error = "dtrun: error: ";
  if (code == 255) {
    std::string said = last_line.empty() ? "" : fmt::format(" ({})", last_line);
    return fmt::format(
        "host {}: ssh failed (exit 255){}; check that 'ssh {} true' works without a password "
        "or prompt (BatchMode), or give the right options with --ssh",
        target, said, target);
  }
  if (status && status->signal != 0) {
    return fmt::format("host {}: its ssh was killed by {}; its agent stops its workers when it "
                       "sees the connection close",
                       target, agent::signal_name(status->signal));
  }
  if (last_line.rfind(remote_error, 0) == 0) {
    // The remote dtrun's own one-line error says what to do.
    return fmt::format("host {}: {}", target, last_line.substr(remote_error.size()));
  }
  std::string said = last_line.empty() ? "" : fmt::format(": {}", last_line);
  if (code == exit_not_found) {
    return fmt::format("host {}: exit code 127{}; install dtrun at '{}' on every host or pass "
                       "--remote-dtrun=PATH",
                       target, said, remote_dtrun);
  }
  return fmt::format("host {}: dtrun there ended with exit code {} before the job did{}", target,
                     code, said);
}

}  // namespace dtrun::launcher
