#include "rendezvous/store/loop_threads.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;

loop_threads::loop_threads(std::size_t count, error_handler on_error) {
  loops_.reserve(count);
  guards_.reserve(count);
  threads_.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    // Concurrency hint 1: one thread runs each loop, so a post from that
    // thread to its own loop takes the scheduler's lock-free path.
    loops_.push_back(std::make_unique<asio::io_context>(1));
    guards_.push_back(asio::make_work_guard(*loops_.back()));
  }
  try {
    for (auto& loop : loops_) {
      threads_.emplace_back([&io = *loop, on_error] {
        // A handler that throws leaves run(); running it again goes on
        // with the rest, as a loop without threads would in the caller's
        // hands. Returning would leave the loop's connections unserved.
        for (;;) {
          try {
            io.run();
            return;
          } catch (const std::exception& e) {
            on_error(e);
          }
        }
      });
    }
  } catch (...) {
    // pthread_create failed (EAGAIN: a process or memory limit): the
    // threads already started must be joined, not destroyed running.
    finish();
    throw;
  }
}

loop_threads::~loop_threads() { finish(); }

asio::io_context& loop_threads::next() {
  auto& loop = *loops_[next_];
  next_ = (next_ + 1) % loops_.size();
  return loop;
}

void loop_threads::finish() {
  for (auto& guard : guards_) guard.reset();
  for (auto& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

}  // namespace dtrun::rendezvous
