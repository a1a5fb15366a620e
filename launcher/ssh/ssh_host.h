// One host of dtrun --hosts (launcher/ssh/ssh_fanout.h) as the fan-out sees
// it: its ssh process, the pipes it reads on the loop, the failure summary
// it reports, and what its failure says.
#pragma once

#include <sys/types.h>

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/output/line_assembler.h"
#include "agent/spec/exit_status.h"
#include "launcher/ssh/ssh_plan.h"

namespace dtrun::launcher {

// One of a host's two output streams, read on the loop, split into lines.
// Reading pauses while its lines are written to the console (console_sink
// pushes back on a slow terminal through the pipe, not a growing buffer).
struct fanout_stream {
  std::optional<boost::asio::posix::stream_descriptor> pipe;
  agent::line_assembler lines{""};
  std::array<char, 65536> buffer{};
  std::string pending;  // lines being written to the console
  bool eof = false;
};

struct fanout_host {
  host_launch launch;
  std::string prefix;  // "node1: "
  pid_t pid = -1;
  int stdin_fd = -1;  // -1: closed
  std::optional<agent::exit_status> status;
  fanout_stream out;
  fanout_stream err;
  bool port_sent = false;  // port_role::read: the rendezvous port was written
  // Holds one of the max_connecting slots: started, and neither its agent
  // said agent_started_line nor its ssh ended yet.
  bool connecting = false;
  // The set-up deadline of a connecting host (fanout_options::setup_timeout).
  std::optional<boost::asio::steady_timer> setup_deadline;
  // The summary block being read from its stderr, and the complete ones.
  std::optional<std::vector<std::string>> block;
  std::vector<std::vector<std::string>> blocks;
  std::string last_line;  // its last stderr line outside a summary
  bool done = false;

  bool finished() const { return status && out.eof && err.eof; }

  // A line of its stderr that belongs to a failure summary (a rule, or a
  // line between two): kept in `block`/`blocks`, and true.
  bool take_summary_line(std::string_view line);

  // Why it ended with `code` before the job did, in one line that says
  // what to check; `remote_dtrun` is the path it was to run.
  std::string describe_failure(int code, const std::string& remote_dtrun) const;
};

}  // namespace dtrun::launcher
