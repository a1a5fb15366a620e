// Drives the store's real protocol logic (store_session) for up to four
// connections over one shared key_table, the way the server does, from a
// script of steps:
//
//   step byte: bits 0-1 connection, bits 2-3 action
//     action 0  the client sends: next byte = n, then n bytes (a closed
//               slot opens a new connection first)
//     action 1  the client closes its connection
//     action 2  the server's pending write completes and the client reads
//               everything (take_output + output_sent)
//     action 3  the server starts a write it does not finish (take_output)
//
// Checked after every step (any violation aborts; ASan/UBSan catch the
// rest, e.g. a watch left pointing at a freed session):
//   - no connection has more unsent output than the output cap;
//   - a closed connection is never handed output (output_ready);
//   - a session the server decided to drop (close_soon) gets closed, and
//     is never asked to close twice after that;
//   - every log line is one printable line.
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "rendezvous/store/store_session.h"

using namespace dtrun::rendezvous;

namespace {

void check(bool condition) {
  if (!condition) std::abort();
}

struct connection final : session_host {
  std::unique_ptr<store_session> core;
  bool close_requested = false;
  bool writing = false;

  void output_ready() override { check(core && !core->closed()); }
  void close_soon() override {
    check(core && !core->closed());
    close_requested = true;
  }
};

class harness {
 public:
  harness() {
    // Small caps so the fuzzer reaches every limit quickly.
    ctx_.limits.request = {.max_key_bytes = 64, .max_value_bytes = 256, .max_keys = 16,
                           .max_request_bytes = 1024};
    ctx_.limits.output_high_water = 512;
    ctx_.log = [](const std::string& line) {
      for (unsigned char c : line) check(c >= 0x20 && c != 0x7f);
    };
  }

  ~harness() {
    // The server stopping: every connection closes (wills fire into the
    // others while they close).
    for (auto& c : conns_) drop(c);
  }

  void run(std::span<const std::uint8_t> script) {
    std::size_t i = 0;
    while (i < script.size()) {
      std::uint8_t step = script[i++];
      auto& c = conns_[step & 3];
      switch ((step >> 2) & 3) {
        case 0: {
          std::size_t n = i < script.size() ? script[i++] : 0;
          n = std::min(n, script.size() - i);
          send(c, script.subspan(i, n));
          i += n;
          break;
        }
        case 1:
          drop(c);
          break;
        case 2:
          if (c.core && !c.core->closed()) {
            if (!c.writing) c.core->take_output();
            c.writing = false;
            c.core->output_sent();
          }
          break;
        case 3:
          if (c.core && !c.writing) {
            c.core->take_output();
            c.writing = true;
          }
          break;
      }
      settle();
    }
  }

 private:
  void send(connection& c, std::span<const std::uint8_t> bytes) {
    if (!c.core) {
      c.core = std::make_unique<store_session>(ctx_, c, "127.0.0.1:1\n");
      c.close_requested = false;
      c.writing = false;
    }
    // The server reads only while the session wants input.
    while (!bytes.empty() && c.core->wants_input()) {
      auto space = c.core->read_space();
      check(!space.empty());
      std::size_t n = std::min(space.size(), bytes.size());
      std::memcpy(space.data(), bytes.data(), n);
      bytes = bytes.subspan(n);
      c.core->received(n);
    }
  }

  void drop(connection& c) {
    if (!c.core) return;
    c.core->close();
    check(!c.core->has_output());
    c.core.reset();  // a callback left behind would now touch freed memory
  }

  // What the server's posted closes do, and the invariants between steps.
  void settle() {
    bool again = true;
    while (again) {
      again = false;
      for (auto& c : conns_) {
        if (c.core && c.close_requested) {
          check(c.core->closing());
          drop(c);
          again = true;  // a will may have failed another session
        }
      }
    }
    for (auto& c : conns_) {
      if (!c.core) continue;
      check(c.core->unsent_bytes() <= ctx_.limits.output_cap());
    }
  }

  store_context ctx_;
  std::array<connection, 4> conns_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  harness h;
  h.run({data, size});
  return 0;
}
