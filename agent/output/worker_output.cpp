#include "agent/output/worker_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <fmt/format.h>

#include "agent/output/line_assembler.h"
#include "agent/output/line_filter.h"
#include "agent/output/output_tail.h"
#include "rendezvous/base/generation_timer.h"

namespace dtrun::agent {
namespace asio = boost::asio;

namespace {

constexpr std::size_t read_size = 64 * 1024;
// Console bytes built from one read before they are written; with a long
// prefix and short lines, one read could otherwise expand many times over.
constexpr std::size_t console_batch = 256 * 1024;

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Moves an fd out of 0..2 (an agent started with stdout closed would get
// them from open()), so handing fds to a worker never clobbers another.
int above_stdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  ::close(fd);
  return moved;
}

int open_or_throw(const std::string& path, int flags) {
  int fd = above_stdio(::open(path.c_str(), flags | O_CLOEXEC, 0666));
  if (fd < 0) {
    throw std::system_error(errno, std::generic_category(), fmt::format("cannot open {}", path));
  }
  return fd;
}

}  // namespace

// One round's filtered_stdout.log or filtered_stderr.log, shared by the
// streams that feed it; closed when the last of them lets go.
struct worker_output::duplicate_file {
  std::vector<std::string> needles;
  std::string path;
  int fd = -1;
  std::function<void(const std::string&)>* log = nullptr;

  ~duplicate_file() { close_fd(fd); }

  // Writes the matching lines of `lines` (whole prefixed lines).
  void write_matching(std::string_view lines, std::size_t prefix_size) {
    if (fd < 0) return;
    std::string matched;
    select_matching_lines(lines, prefix_size, needles, matched);
    std::string_view rest = matched;
    while (!rest.empty() && fd >= 0) {
      ssize_t n = ::write(fd, rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        if (log != nullptr && *log) {
          (*log)(fmt::format("cannot write {}: {}; its copy stops here", path,
                             std::generic_category().message(errno)));
        }
        close_fd(fd);
        return;
      }
      rest.remove_prefix(static_cast<std::size_t>(n));
    }
  }
};

// One tee'd stream: reads the pipe, copies the bytes to the log file, and
// hands whole prefixed lines to the console, one batch at a time (the next
// read waits for the console: back-pressure). Owned by shared_ptr because
// reads and console writes in flight keep it alive after end_round().
class worker_output::piped_stream : public std::enable_shared_from_this<piped_stream> {
 public:
  // `raw`: each read goes to the console as it is (no prefix, no lines).
  // `on_bytes`: called after each read that brought bytes.
  piped_stream(asio::io_context& io, int read_fd, int file_fd, std::string file_path,
               console_sink& console, std::string prefix,
               std::function<void(const std::string&)>& log,
               std::shared_ptr<duplicate_file> duplicates, bool raw,
               std::function<void()> on_bytes)
      : raw_(raw),
        on_bytes_(std::move(on_bytes)),
        pipe_(io, read_fd),
        file_fd_(file_fd),
        file_path_(std::move(file_path)),
        console_(console),
        prefix_size_(prefix.size()),
        duplicates_(std::move(duplicates)),
        lines_(std::move(prefix)),
        buffer_(read_size),
        log_(log) {}

  ~piped_stream() { close_fd(file_fd_); }

  void start(std::function<void()> on_end) {
    on_end_ = std::move(on_end);
    read();
  }

  const std::string& last_line() const { return tail_.last(); }

  // The round is over: no more reads, no callback.
  void close() {
    closed_ = true;
    on_end_ = nullptr;
    boost::system::error_code ignored;
    pipe_.close(ignored);
    close_fd(file_fd_);
    duplicates_.reset();
  }

 private:
  void read() {
    if (closed_) return;
    pipe_.async_read_some(asio::buffer(buffer_),
                          [self = shared_from_this()](const boost::system::error_code& ec,
                                                      std::size_t n) { self->on_read(ec, n); });
  }

  void on_read(const boost::system::error_code& ec, std::size_t n) {
    if (closed_) return;
    if (ec) {  // end of the stream (every writer closed it) or a read error
      out_.clear();
      lines_.finish(out_);
      duplicate();
      if (out_.empty()) {
        end();
      } else {
        console_.write(out_, [self = shared_from_this()] { self->end(); });
      }
      return;
    }
    tail_.feed(std::string_view(buffer_.data(), n));
    if (on_bytes_ && n > 0) on_bytes_();
    if (raw_) {
      out_.assign(buffer_.data(), n);
      console_.write(out_, [self = shared_from_this()] { self->read(); });
      return;
    }
    write_file(buffer_.data(), n);
    unfed_ = std::string_view(buffer_.data(), n);
    pump();
  }

  // Feeds the rest of the last read to the console, a batch at a time.
  void pump() {
    if (closed_) return;
    out_.clear();
    unfed_.remove_prefix(lines_.feed(unfed_, out_, console_batch));
    if (out_.empty()) {  // only an unfinished line so far
      read();
      return;
    }
    duplicate();
    console_.write(out_, [self = shared_from_this()] {
      if (self->unfed_.empty()) {
        self->read();
      } else {
        self->pump();
      }
    });
  }

  void write_file(const char* data, std::size_t size) {
    while (size > 0 && file_fd_ >= 0) {
      ssize_t n = ::write(file_fd_, data, size);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        // The console copy goes on; the file stops here, said once.
        if (log_) log_(fmt::format("cannot write {}: {}; its copy stops here", file_path_,
                                   std::generic_category().message(errno)));
        close_fd(file_fd_);
        return;
      }
      data += n;
      size -= static_cast<std::size_t>(n);
    }
  }

  // The lines about to go to the console that match the filters, to the
  // round's filtered file.
  void duplicate() {
    if (duplicates_ && !out_.empty()) duplicates_->write_matching(out_, prefix_size_);
  }

  void end() {
    if (closed_) return;
    closed_ = true;
    boost::system::error_code ignored;
    pipe_.close(ignored);
    close_fd(file_fd_);
    duplicates_.reset();
    auto on_end = std::move(on_end_);
    on_end_ = nullptr;
    if (on_end) on_end();
  }

  bool raw_;
  std::function<void()> on_bytes_;
  asio::posix::stream_descriptor pipe_;
  int file_fd_;
  std::string file_path_;
  console_sink& console_;
  std::size_t prefix_size_;
  std::shared_ptr<duplicate_file> duplicates_;  // null: no filters
  line_assembler lines_;
  line_tail tail_;  // its last line, for `dtrun status`
  std::vector<char> buffer_;
  std::string_view unfed_;
  std::string out_;
  std::function<void(const std::string&)>& log_;
  std::function<void()> on_end_;
  bool closed_ = false;
};

worker_output::worker_output(asio::io_context& io, log_spec spec,
                             std::function<void(const std::string&)> log,
                             std::chrono::milliseconds drain_grace, int console_out,
                             int console_err)
    : io_(io),
      spec_(std::move(spec)),
      log_(std::move(log)),
      drain_grace_(drain_grace),
      console_out_(console_out),
      console_err_(console_err) {}

worker_output::~worker_output() { end_round(); }

console_sink& worker_output::console(int fd) {
  auto& sink = fd == console_out_ ? stdout_sink_ : stderr_sink_;
  if (!sink) sink.emplace(io_, fd);
  return *sink;
}

int worker_output::open_stream(worker_slot& slot, int local_rank, stream_route route,
                               int console_fd, const std::string& path, const std::string& prefix,
                               std::shared_ptr<duplicate_file> duplicates) {
  switch (route) {
    case stream_route::console:
      return -1;
    case stream_route::discard:
      return open_or_throw("/dev/null", O_WRONLY);
    case stream_route::file:
      slot.log_files.push_back(path);
      return open_or_throw(path, O_WRONLY | O_CREAT | O_TRUNC);
    case stream_route::prefixed_console:
    case stream_route::watched_console:
    case stream_route::file_and_console: {
      int file_fd = route == stream_route::file_and_console
                        ? open_or_throw(path, O_WRONLY | O_CREAT | O_TRUNC)
                        : -1;
      int ends[2];
      if (::pipe2(ends, O_CLOEXEC) != 0) {
        int error = errno;
        if (file_fd >= 0) ::close(file_fd);
        throw std::system_error(error, std::generic_category(),
                                fmt::format("cannot create a pipe for local rank {}", local_rank));
      }
      // As torchrun: only tee'd lines are duplicated.
      if (route != stream_route::file_and_console) duplicates.reset();
      bool raw = route == stream_route::watched_console;
      if (raw) duplicates.reset();
      auto on_bytes = [this, local_rank, index = static_cast<int>(slot.pipes.size())] {
        if (auto it = slots_.find(local_rank); it != slots_.end()) {
          it->second.last_pipe = index;
          it->second.last_bytes_at = std::chrono::steady_clock::now();
        }
        if (on_output_) on_output_(local_rank);
      };
      slot.pipes.push_back(std::make_shared<piped_stream>(io_, ends[0], file_fd, path,
                                                          console(console_fd), prefix, log_,
                                                          std::move(duplicates), raw, on_bytes));
      return above_stdio(ends[1]);
    }
  }
  return -1;
}

child_stdio worker_output::prepare(int local_rank, const std::string& rank_dir,
                                   const std::string& prefix) {
  release(local_rank);
  open_duplicate_files(std::filesystem::path(rank_dir).parent_path().string());
  worker_slot& slot = slots_[local_rank];
  worker_routes routes = spec_.routes(local_rank);
  try {
    slot.child.out = open_stream(slot, local_rank, routes.out, console_out_,
                                 rank_dir + "/stdout.log", prefix, stdout_duplicates_);
    slot.child.err = open_stream(slot, local_rank, routes.err, console_err_,
                                 rank_dir + "/stderr.log", prefix, stderr_duplicates_);
  } catch (...) {
    release(local_rank);
    throw;
  }
  return slot.child;
}

void worker_output::open_duplicate_files(const std::string& attempt_dir) {
  auto open = [&](std::shared_ptr<duplicate_file>& file, const std::vector<std::string>& needles,
                  const char* name) {
    if (needles.empty() || file) return;
    auto opened = std::make_shared<duplicate_file>();
    opened->needles = needles;
    opened->path = (std::filesystem::path(attempt_dir) / name).string();
    opened->fd = open_or_throw(opened->path, O_WRONLY | O_CREAT | O_TRUNC);
    opened->log = &log_;
    file = std::move(opened);
  };
  open(stdout_duplicates_, spec_.duplicate_stdout_filters, "filtered_stdout.log");
  open(stderr_duplicates_, spec_.duplicate_stderr_filters, "filtered_stderr.log");
}

void worker_output::spawned(int local_rank) {
  auto it = slots_.find(local_rank);
  if (it == slots_.end()) return;
  worker_slot& slot = it->second;
  // The write ends now live in the worker only, so its exit (and its
  // children's) is the pipe's end.
  close_fd(slot.child.out);
  close_fd(slot.child.err);
  slot.open_pipes = static_cast<int>(slot.pipes.size());
  for (auto& pipe : slot.pipes) {
    pipe->start([this, local_rank] { pipe_ended(local_rank); });
  }
}

void worker_output::pipe_ended(int local_rank) {
  auto it = slots_.find(local_rank);
  if (it == slots_.end()) return;
  worker_slot& slot = it->second;
  if (--slot.open_pipes > 0 || !slot.waiter) return;
  auto then = std::move(slot.waiter);
  slot.waiter = nullptr;
  slot.grace.reset();
  then();  // may end the round: touch nothing after this
}

void worker_output::when_drained(int local_rank, std::function<void()> then) {
  auto it = slots_.find(local_rank);
  if (it == slots_.end() || it->second.open_pipes == 0) {
    then();
    return;
  }
  worker_slot& slot = it->second;
  slot.waiter = std::move(then);
  // Only this waiter's grace: replacing or destroying the timer drops an
  // expiry already queued (generation_timer), which must not release a
  // later waiter of this rank.
  slot.grace = std::make_unique<generation_timer>(io_);
  slot.grace->arm_after(drain_grace_, [this, local_rank] {
    auto found = slots_.find(local_rank);
    if (found == slots_.end() || !found->second.waiter) return;
    // Something still holds the pipe; its lines keep coming until the
    // round ends, but the worker's exit is not held up any longer.
    auto waiter = std::move(found->second.waiter);
    found->second.waiter = nullptr;
    waiter();
  });
}

namespace {

// The newer of a worker's own non-empty log files, with its time.
std::optional<std::pair<std::string, std::filesystem::file_time_type>> newest_log(
    const std::vector<std::string>& files) {
  std::optional<std::pair<std::string, std::filesystem::file_time_type>> newest;
  for (const auto& path : files) {
    std::error_code ec;
    auto time = std::filesystem::last_write_time(path, ec);
    if (ec) continue;
    auto size = std::filesystem::file_size(path, ec);
    if (ec || size == 0) continue;
    if (!newest || time > newest->second) newest.emplace(path, time);
  }
  return newest;
}

}  // namespace

std::optional<std::string> worker_output::last_line(int local_rank) const {
  auto it = slots_.find(local_rank);
  if (it == slots_.end()) return std::nullopt;
  const worker_slot& slot = it->second;
  if (slot.last_pipe >= 0 && static_cast<std::size_t>(slot.last_pipe) < slot.pipes.size()) {
    const std::string& line = slot.pipes[static_cast<std::size_t>(slot.last_pipe)]->last_line();
    if (!line.empty()) return line;
  }
  // The newest file first: the worker's last word may be on either stream.
  auto newest = newest_log(slot.log_files);
  return newest ? last_line_of_file(newest->first) : std::nullopt;
}

std::optional<double> worker_output::seconds_since_output(int local_rank) const {
  auto it = slots_.find(local_rank);
  if (it == slots_.end()) return std::nullopt;
  const worker_slot& slot = it->second;
  if (slot.last_pipe >= 0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - slot.last_bytes_at)
        .count();
  }
  auto newest = newest_log(slot.log_files);
  if (!newest) return std::nullopt;
  auto age = std::filesystem::file_time_type::clock::now() - newest->second;
  return std::max(0.0, std::chrono::duration<double>(age).count());
}

void worker_output::release(int local_rank) {
  auto it = slots_.find(local_rank);
  if (it == slots_.end()) return;
  worker_slot& slot = it->second;
  close_fd(slot.child.out);
  close_fd(slot.child.err);
  for (auto& pipe : slot.pipes) pipe->close();
  slots_.erase(it);  // destroys the grace timer, cancelling it
}

void worker_output::end_round() {
  while (!slots_.empty()) release(slots_.begin()->first);
  // The next round's first prepare() opens its own (in its attempt dir).
  stdout_duplicates_.reset();
  stderr_duplicates_.reset();
}

}  // namespace dtrun::agent
