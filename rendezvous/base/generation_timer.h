// A steady_timer whose cancelled or replaced arming never acts.
//
// Asio runs a wait's handler with success when the timer had already
// expired before cancel(), expires_after() or the timer's destruction: the
// completion was queued. Every arming here gets a generation number, the
// handler carries it, and the callback runs only while that arming is
// still the current one: arm_*() and cancel() start a new generation, and
// so does destroying the timer (the generation lives in a shared counter
// that outlives it), so a queued expiry never touches an object that is
// gone. The callback's own captures (`this`, shared_from_this()) are the
// caller's to keep alive; the callback still checks the caller's state
// (closed, phase) as before.
//
// One thread: the timer and its callbacks belong to one io_context's loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>

namespace dtrun {

class generation_timer {
 public:
  using clock = std::chrono::steady_clock;

  explicit generation_timer(boost::asio::io_context& io) : timer_(io) {}
  explicit generation_timer(const boost::asio::any_io_executor& executor) : timer_(executor) {}
  generation_timer(const generation_timer&) = delete;
  generation_timer& operator=(const generation_timer&) = delete;
  // A queued expiry of the last arming finds the generation moved on.
  ~generation_timer() { ++*generation_; }

  // Runs `on_expiry()` (no arguments) once, `delay` from now, unless the
  // timer is armed again, cancelled or destroyed first. Replaces any
  // earlier arming: its callback never runs.
  template <typename Callback>
  void arm_after(clock::duration delay, Callback on_expiry) {
    timer_.expires_after(delay);
    wait(std::move(on_expiry));
  }

  // The same at `deadline` (already past: as soon as the loop gets to it).
  template <typename Callback>
  void arm_at(clock::time_point deadline, Callback on_expiry) {
    timer_.expires_at(deadline);
    wait(std::move(on_expiry));
  }

  // The current arming's callback never runs. Harmless when not armed.
  void cancel() {
    ++*generation_;
    timer_.cancel();
  }

 private:
  template <typename Callback>
  void wait(Callback on_expiry) {
    timer_.async_wait([generation = generation_, armed = ++*generation_,
                       on_expiry = std::move(on_expiry)](const boost::system::error_code& ec) mutable {
      if (ec || armed != *generation) return;
      on_expiry();
    });
  }

  boost::asio::steady_timer timer_;
  std::shared_ptr<std::uint64_t> generation_ = std::make_shared<std::uint64_t>(0);
};

}  // namespace dtrun
