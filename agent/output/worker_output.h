// The plumbing behind each worker's stdout and stderr for one agent, round
// after round, as log_spec routes them:
//
//   console           nothing: the worker inherits the agent's fd
//   discard           /dev/null
//   file              the log file, handed to the worker as its fd: the
//                     agent is not in the data path
//   file_and_console  a pipe the agent reads on its event loop (async
//                     reads, no thread, no polling): the bytes go unchanged
//                     to the log file and, as whole prefixed lines, to the
//                     agent's own stdout/stderr (console_sink)
//   prefixed_console  the same pipe without the file (a rank shown by
//                     --local-ranks-filter: its lines carry its prefix)
//   watched_console   a pipe whose reads go unchanged to the console
//                     (--hang-timeout: the agent sees that output came)
//
// Files: <rank_dir>/stdout.log and stderr.log (rank_dir is
// <run dir>/attempt_<n>/<local_rank>, torchrun's layout).
//
// With --duplicate-std{out,err}-filters, each file_and_console line that
// matches is also written (prefixed) to <attempt dir>/filtered_stdout.log
// or filtered_stderr.log, one file per round shared by all ranks, opened
// (empty) by the round's first prepare(). Whole lines, written one batch
// at a time on the loop, so ranks' lines never mix.
//
// Memory per piped stream is bounded (a 64 KiB read buffer, a line of at
// most 64 KiB, about 256 KiB of console output); when the console is slow
// the agent stops reading that pipe until its lines are written, so the
// worker blocks in write() instead of the agent growing a buffer.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "agent/output/console_sink.h"
#include "agent/spec/log_spec.h"
#include "rendezvous/base/generation_timer.h"

namespace dtrun::agent {

// What a new worker gets as stdout/stderr: -1 for the agent's own, else an
// fd of the agent's to put in its place.
struct child_stdio {
  int out = -1;
  int err = -1;
};

class worker_output {
 public:
  // How long a worker's pipes may stay open after it exited (a grandchild
  // holding them) before the agent stops waiting for their last lines.
  static constexpr std::chrono::milliseconds default_drain_grace{2000};

  // `log`: the agent's one-line messages (a log file that cannot be
  // written). `console_out`/`console_err`: where tee'd lines go (the
  // agent's stdout and stderr; tests pass pipes).
  worker_output(boost::asio::io_context& io, log_spec spec,
                std::function<void(const std::string&)> log,
                std::chrono::milliseconds drain_grace = default_drain_grace, int console_out = 1,
                int console_err = 2);
  ~worker_output();

  worker_output(const worker_output&) = delete;
  worker_output& operator=(const worker_output&) = delete;

  const log_spec& spec() const { return spec_; }

  // Called on the loop with the local rank each time bytes arrive from one
  // of its piped streams (hang detection's "the worker wrote something").
  void on_output(std::function<void(int local_rank)> callback) { on_output_ = std::move(callback); }

  // Creates what local_rank's streams need in `rank_dir` (which must
  // exist): log files, pipes. `prefix` starts each of its console lines.
  // Call spawned() after the spawn, whether it worked or not. Throws
  // std::system_error naming the file when one cannot be created.
  child_stdio prepare(int local_rank, const std::string& rank_dir, const std::string& prefix);

  // The worker was spawned (or failed to be): closes the agent's copies of
  // the fds handed to it and starts reading its pipes.
  void spawned(int local_rank);

  // Calls `then` once local_rank's pipes have all reached their end and
  // their last lines are written, or `drain_grace` after this call if
  // something keeps one open; at once (inside this call) when the worker
  // has no pipes. One waiter per worker.
  void when_drained(int local_rank, std::function<void()> then);

  // The round is over: closes every pipe and file of it and forgets the
  // waiters (not called). Lines already handed to the console still go out.
  void end_round();

  // local_rank's last output line, as it came (output_tail.h): the line of
  // whichever of its piped streams spoke last, else the end of the log
  // file it writes itself (the newer of stdout.log and stderr.log).
  // nullopt when the agent sees none of its output (the console) or it
  // wrote nothing yet; only while its round lasts.
  std::optional<std::string> last_line(int local_rank) const;

  // Seconds since local_rank's last output the agent saw: its last read
  // from a piped stream, else the newer log file's modification time.
  // nullopt under the same conditions as last_line().
  std::optional<double> seconds_since_output(int local_rank) const;

 private:
  class piped_stream;
  struct duplicate_file;
  struct worker_slot {
    child_stdio child;  // ours until spawned()
    std::vector<std::shared_ptr<piped_stream>> pipes;
    int last_pipe = -1;                  // the pipe that brought bytes last
    std::chrono::steady_clock::time_point last_bytes_at{};  // when it did
    std::vector<std::string> log_files;  // written by the worker itself (route file)
    int open_pipes = 0;
    std::function<void()> waiter;
    std::unique_ptr<generation_timer> grace;
  };

  int open_stream(worker_slot& slot, int local_rank, stream_route route, int console_fd,
                  const std::string& path, const std::string& prefix,
                  std::shared_ptr<duplicate_file> duplicates);
  void open_duplicate_files(const std::string& attempt_dir);
  console_sink& console(int fd);
  void pipe_ended(int local_rank);
  void release(int local_rank);

  boost::asio::io_context& io_;
  log_spec spec_;
  std::function<void(const std::string&)> log_;
  std::function<void(int)> on_output_;
  std::chrono::milliseconds drain_grace_;
  int console_out_;
  int console_err_;
  std::optional<console_sink> stdout_sink_;
  std::optional<console_sink> stderr_sink_;
  std::map<int, worker_slot> slots_;
  // This round's filtered_std{out,err}.log (null: no filters, or not open yet).
  std::shared_ptr<duplicate_file> stdout_duplicates_;
  std::shared_ptr<duplicate_file> stderr_duplicates_;
};

}  // namespace dtrun::agent
