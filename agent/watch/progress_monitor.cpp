#include "agent/watch/progress_monitor.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "rendezvous/base/generation_timer.h"

namespace dtrun::agent {
namespace asio = boost::asio;

namespace {

constexpr auto max_tick = std::chrono::seconds(30);
constexpr auto min_tick = std::chrono::milliseconds(20);

std::chrono::milliseconds tick_for(std::chrono::milliseconds timeout) {
  auto quarter = timeout / 4;
  return std::clamp<std::chrono::milliseconds>(quarter, min_tick, max_tick);
}

bool is_output_file(const std::string& name) {
  return name == "stdout.log" || name == "stderr.log";
}

}  // namespace

progress_monitor::progress_monitor(asio::io_context& io, std::chrono::milliseconds timeout,
                                   hooks callbacks)
    : io_(io),
      timeout_(timeout),
      tick_(tick_for(timeout)),
      hooks_(std::move(callbacks)),
      timer_(io),
      event_buffer_(64 * 1024),
      alive_(std::make_shared<bool>(true)) {
  int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) {
    if (hooks_.error) {
      hooks_.error(fmt::format("hang detection: inotify unavailable ({}); writes to log files "
                               "and the heartbeat file are not seen as progress",
                               std::strerror(errno)));
    }
    return;
  }
  inotify_.emplace(io_, fd);
  read_events();
}

progress_monitor::~progress_monitor() {
  *alive_ = false;
  ++generation_;
}

void progress_monitor::start_round() {
  unwatch_all();
  last_by_rank_.clear();
  round_start_ = clock::now();
  last_local_ = round_start_;
  last_job_ = round_start_;
  last_counter_.reset();
  progressed_since_tick_ = false;
  running_ = true;
  ++generation_;
  arm_tick();
}

void progress_monitor::stop() {
  running_ = false;
  ++generation_;
  timer_.cancel();
}

void progress_monitor::watch_rank_dir(int local_rank, const std::string& dir,
                                      const std::string& heartbeat_name) {
  if (!inotify_) return;
  int wd = ::inotify_add_watch(inotify_->native_handle(), dir.c_str(),
                               IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_CREATE | IN_MOVED_TO);
  if (wd < 0) {
    if (hooks_.error) {
      hooks_.error(fmt::format("hang detection: cannot watch {}: {}", dir, std::strerror(errno)));
    }
    return;
  }
  watches_[wd] = watched_dir{local_rank, heartbeat_name};
}

void progress_monitor::unwatch_all() {
  if (inotify_) {
    for (const auto& entry : watches_) ::inotify_rm_watch(inotify_->native_handle(), entry.first);
  }
  watches_.clear();
}

void progress_monitor::progress(int local_rank) {
  auto now = clock::now();
  last_by_rank_[local_rank] = now;
  last_local_ = now;
  progressed_since_tick_ = true;
}

std::optional<progress_monitor::clock::time_point> progress_monitor::last_progress(
    int local_rank) const {
  auto it = last_by_rank_.find(local_rank);
  if (it != last_by_rank_.end()) return it->second;
  if (round_start_ == clock::time_point{}) return std::nullopt;
  return round_start_;
}

void progress_monitor::arm_tick() {
  // start_round() re-arms and stop() cancels: an older tick never runs.
  timer_.arm_after(tick_, [this] {
    if (running_) on_tick();
  });
}

void progress_monitor::on_tick() {
  bool progressed = progressed_since_tick_;
  progressed_since_tick_ = false;
  auto decide = [this, alive = std::weak_ptr<bool>(alive_),
                 armed = generation_](std::int64_t counter) {
    auto still = alive.lock();
    if (!still || !*still || armed != generation_ || !running_) return;
    auto now = clock::now();
    if (last_counter_ && counter != *last_counter_) last_job_ = now;
    last_counter_ = counter;
    auto last = std::max(last_job_, last_local_);
    auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(now - last);
    if (idle >= timeout_) {
      stop();
      if (hooks_.hang) hooks_.hang(idle);
      return;
    }
    arm_tick();
  };
  if (!hooks_.share) {
    decide(0);
    return;
  }
  hooks_.share(progressed, std::move(decide));
}

void progress_monitor::read_events() {
  inotify_->async_read_some(
      asio::buffer(event_buffer_),
      [this, alive = std::weak_ptr<bool>(alive_)](const boost::system::error_code& ec,
                                                  std::size_t n) {
        auto still = alive.lock();
        if (!still || !*still) return;
        if (ec) {
          if (ec != asio::error::operation_aborted && hooks_.error) {
            hooks_.error(fmt::format("hang detection: reading inotify events failed: {}",
                                     ec.message()));
          }
          return;
        }
        on_events(n);
        read_events();
      });
}

void progress_monitor::on_events(std::size_t bytes) {
  std::size_t offset = 0;
  while (offset + sizeof(inotify_event) <= bytes) {
    inotify_event header{};
    std::memcpy(&header, event_buffer_.data() + offset, sizeof header);
    std::size_t size = sizeof(inotify_event) + header.len;
    if (offset + size > bytes) break;  // the kernel never splits an event
    std::string name;
    if (header.len > 0) {
      const char* text = event_buffer_.data() + offset + sizeof(inotify_event);
      name.assign(text, ::strnlen(text, header.len));
    }
    offset += size;
    auto it = watches_.find(header.wd);
    if (it == watches_.end() || (header.mask & IN_ISDIR) != 0) continue;
    // Only the worker's own writes: not its error file, nor the stack dumps
    // dtrun itself makes it write.
    if (is_output_file(name) || name == it->second.heartbeat_name) progress(it->second.local_rank);
  }
}

}  // namespace dtrun::agent
