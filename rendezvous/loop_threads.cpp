#include "rendezvous/loop_threads.h"

namespace dtrun::rendezvous {

namespace asio = boost::asio;

loop_threads::loop_threads(std::size_t count) {
  loops_.reserve(count);
  guards_.reserve(count);
  threads_.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    // Concurrency hint 1: one thread runs each loop, so a post from that
    // thread to its own loop takes the scheduler's lock-free path.
    loops_.push_back(std::make_unique<asio::io_context>(1));
    guards_.push_back(asio::make_work_guard(*loops_.back()));
  }
  for (auto& loop : loops_) {
    threads_.emplace_back([&io = *loop] { io.run(); });
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
