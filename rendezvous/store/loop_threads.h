// Event loops on threads of their own, for a server that spreads its
// connections over several cores (store_server with threads). Each
// loop is an io_context run by exactly one thread, so whatever lives on a
// loop needs no strand: work for it from elsewhere is posted to it.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

namespace dtrun::rendezvous {

class loop_threads {
 public:
  // Called on a loop's thread when one of its handlers throws (out of
  // memory, say); the loop then goes on.
  using error_handler = std::function<void(const std::exception&)>;

  // Starts `count` threads, each running its own loop until finish().
  // Throws std::system_error, with none left running, when the system
  // cannot start them all.
  loop_threads(std::size_t count, error_handler on_error);
  // finish(), then join.
  ~loop_threads();

  loop_threads(const loop_threads&) = delete;
  loop_threads& operator=(const loop_threads&) = delete;

  // The loops in turn (round robin). Call from one thread.
  boost::asio::io_context& next();

  // Lets each loop return once it has nothing left to do (what was posted
  // to it still runs), and waits for the threads. Idempotent.
  void finish();

 private:
  using work_guard = boost::asio::executor_work_guard<boost::asio::io_context::executor_type>;
  std::vector<std::unique_ptr<boost::asio::io_context>> loops_;
  std::vector<work_guard> guards_;
  std::vector<std::thread> threads_;
  std::size_t next_ = 0;
};

}  // namespace dtrun::rendezvous
