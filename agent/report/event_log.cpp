#include "agent/report/event_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "rendezvous/base/printable.h"

namespace dtrun::agent {

std::string iso8601_utc_ms(std::chrono::system_clock::time_point t) {
  using namespace std::chrono;
  auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  long millis = static_cast<long>(ms % 1000);
  if (millis < 0) {  // before 1970: keep the fraction positive
    millis += 1000;
    seconds -= 1;
  }
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", utc.tm_year + 1900,
                     utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, millis);
}

std::string format_event_line(std::chrono::system_clock::time_point time, std::string_view event,
                              const nlohmann::ordered_json& identity,
                              const nlohmann::ordered_json& fields) {
  nlohmann::ordered_json line = nlohmann::ordered_json::object();
  line["time"] = iso8601_utc_ms(time);
  line["event"] = std::string(event);
  for (const auto& [k, v] : identity.items()) line[k] = v;
  for (const auto& [k, v] : fields.items()) line[k] = v;
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

event_log::~event_log() {
  if (owned_ && fd_ >= 0) ::close(fd_);
}

void event_log::open(const std::string& path) {
  path_ = path == "-" ? "- (stderr)" : path;
  if (path == "-") {
    fd_ = STDERR_FILENO;
    owned_ = false;
    return;
  }
  // O_NONBLOCK so that a FIFO nobody reads fails at once (ENXIO) instead
  // of blocking the start forever; writes are blocking again below.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0 && errno == ENXIO) {
    throw std::runtime_error(fmt::format(
        "cannot open the event log {} (--event-log): it is a FIFO with no reader; start the "
        "reader first",
        printable(path)));
  }
  if (fd < 0) {
    throw std::system_error(errno, std::generic_category(),
                            fmt::format("cannot open the event log {} for appending (--event-log)",
                                        printable(path)));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  fd_ = fd;
  owned_ = true;
}

void event_log::emit(std::string_view event, const nlohmann::ordered_json& fields) const {
  if (fd_ < 0) return;
  std::string line = format_event_line(std::chrono::system_clock::now(), event, identity_, fields);
  // O_APPEND makes one write() atomic with respect to other appenders; a
  // short write (disk full) is not retried, so a line is whole or cut,
  // never mixed with another's.
  for (;;) {
    ssize_t n = ::write(fd_, line.data(), line.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return write_failed(errno);
    if (static_cast<std::size_t>(n) < line.size()) return write_failed(ENOSPC);
    wrote_ = true;
    return;
  }
}

void event_log::write_failed(int error) const {
  if (!wrote_) {
    throw std::system_error(error, std::generic_category(),
                            fmt::format("cannot write the event log {} (--event-log)", path_));
  }
  if (warned_) return;
  warned_ = true;
  std::string message = fmt::format(
      "warning: cannot write the event log {}: {}; the job goes on, later events may be lost",
      path_, std::generic_category().message(error));
  if (warn_) {
    warn_(message);
  } else {
    fmt::print(stderr, "dtrun: {}\n", message);
  }
}

}  // namespace dtrun::agent
