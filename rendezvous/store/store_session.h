// One store connection's protocol logic without a socket: bytes in,
// replies and watch/wait events out, the shared key_table in between.
// store_server wraps it in Asio I/O; the fuzzer drives it directly, several
// sessions over one table, the way many connections share a server.
//
// Memory is bounded by what the client sent (see docs/store.md, "Memory
// budget"): the input buffer grows only as bytes arrive, every reply is
// capped, and the output a connection has not read yet is capped. A client
// over a cap is disconnected with one log line; the protocol has no error
// reply a TCPStore client would understand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rendezvous/store/server_key_table.h"
#include "rendezvous/store/wire_codec.h"

namespace dtrun::rendezvous {

// dtrun's one extension, invisible to PyTorch clients: a "last will".
// A client that SETs the wire key "/dtrun/will/<name>" to "<target>\n<value>"
// asks the server to SET <target> to <value> if its connection closes while
// that will key still holds exactly this text. The will key is then removed.
// Deleting or overwriting the will key withdraws it. Agents use it so that
// a node that dies (its connection closes) wakes the survivors at once,
// instead of after a heartbeat timeout.
inline constexpr std::string_view will_key_prefix = "/dtrun/will/";

struct store_server_stats {
  std::uint64_t connections_accepted = 0;
  std::uint64_t connections_open = 0;
  std::uint64_t requests = 0;              // every parsed request, all kinds
  std::uint64_t connections_rejected = 0;  // closed for bad input or over a cap
  std::uint64_t connections_refused = 0;   // turned away by options.admit
  std::uint64_t bytes_received = 0;        // from every client, framing included
  std::uint64_t bytes_sent = 0;            // replies and watch events
};

// Caps on what a connection may make the server hold.
struct session_limits {
  // What one request may carry.
  wire::limits request;
  // A client's own requests are not processed while more than this much of
  // its output is unsent (it is not reading); reading it resumes them.
  std::size_t output_high_water = 16 * 1024 * 1024;
  // The largest single reply or watch event. 0: a key and two maximal
  // values plus framing, so any watch event (old and new value) fits.
  std::size_t max_reply_bytes = 0;

  // max_reply_bytes with 0 resolved.
  std::size_t reply_cap() const;
  // Most output one connection may have unsent: new output (a reply to
  // its own request, or an event pushed by another client's write) is
  // added only while no more than the high-water mark is unsent, so the
  // high-water mark plus one reply. Own requests wait; events disconnect.
  std::size_t output_cap() const { return output_high_water + reply_cap(); }
};

// What every session of one server shares.
struct store_context {
  key_table table;
  session_limits limits;
  store_server_stats stats;
  // One diagnostic line (no trailing newline); outside text in it has been
  // through dtrun::printable().
  std::function<void(const std::string&)> log;
};

// The I/O side of a session.
class session_host {
 public:
  virtual ~session_host() = default;
  // Output is waiting (take_output()). May be called from inside another
  // session's request, while the key_table is notifying.
  virtual void output_ready() = 0;
  // The session must be closed (store_session::close()), but not from
  // inside this call, which may come from the middle of a key_table update
  // made by another session: close it later (the server posts it).
  virtual void close_soon() = 0;
};

class store_session {
 public:
  // `peer` names the client in log lines (escaped here). `ctx` and `host`
  // must outlive the session.
  store_session(store_context& ctx, session_host& host, std::string peer);
  // Closes the session if the host did not.
  ~store_session();

  store_session(const store_session&) = delete;
  store_session& operator=(const store_session&) = delete;

  // Where the next read may put bytes: at least one free byte, and the
  // buffer never grows by more than what has arrived (plus one read
  // chunk). Throws std::bad_alloc when memory is out (the caller then
  // calls fail()).
  std::span<std::uint8_t> read_space();
  // `n` bytes were written into read_space(): parse and answer what is
  // complete. Never throws: a request that cannot be handled fails the
  // session.
  void received(std::size_t n);

  // Bytes allocated for input: at most twice the largest unparsed input
  // held plus one 64 KiB read chunk; back to 4 KiB once all input is
  // handled (if it had grown past 256 KiB).
  std::size_t input_capacity() const { return buffer_.capacity(); }

  // False while the client has too much output unsent, or once the session
  // is closing: the host stops reading until output_sent().
  bool wants_input() const;

  bool has_output() const { return !pending_.empty(); }
  // All output not yet handed out; it counts against the output cap until
  // output_sent().
  std::string take_output();
  // The last take_output() is on the wire: resumes held-back requests.
  void output_sent();
  // Bytes queued or handed out and not yet sent.
  std::size_t unsent_bytes() const { return pending_.size() + in_flight_; }

  // Logs `reason` once, drops pending output and asks the host to close.
  // Safe anywhere, including inside key_table callbacks.
  void fail(const std::string& reason);
  bool closing() const { return closing_; }

  // Ends the session: cancels its waits, removes every watch it registered,
  // executes its last wills. No output after this. Idempotent. Must not be
  // called from inside a key_table callback (use fail()).
  void close();
  bool closed() const { return closed_; }

 private:
  void process();
  void handle_requests();
  void handle(wire::request& r);
  void set_all(wire::request& r);
  void cancel_waits(std::string& out);
  // The ops of handle() that take more than a few lines: each writes its
  // reply into `out`, or fails the session and returns false (no reply).
  bool reply_compare_set(const wire::request& r, std::string& out);
  bool reply_get(const wire::request& r, std::string& out);
  bool reply_add(const wire::request& r, std::string& out);
  bool reply_multi_get(const wire::request& r, std::string& out);
  bool reply_list_keys(std::string& out);
  void append(const wire::request& r);  // APPEND has no reply
  void reply(std::string bytes);
  // Whether output caused by another client's write (a watch event, a
  // wake-up) of `bytes` fits under the output cap; fails the session if not.
  bool event_fits(std::size_t bytes);
  bool reply_fits(std::size_t bytes, std::string_view what);
  void start_wait(const std::vector<std::string>& keys);
  // BARRIER: STOP_WAITING now when this arrival completes it, else a wait
  // like WAIT's (CANCEL_WAIT and closing end it).
  void start_barrier(const wire::request& r);
  void keep_wait(wait_handle handle);
  void on_wait_ready();
  void start_watch(const std::string& key);
  void on_watch_event(std::uint8_t event, const std::string& key, std::string_view old_value,
                      std::string_view new_value);
  void remember_will(const std::string& key, const std::string& value);
  void execute_wills();

  store_context& ctx_;
  session_host& host_;
  std::string peer_;
  std::vector<std::uint8_t> buffer_;
  std::size_t begin_ = 0, end_ = 0, wanted_ = 0;
  // How much of an incomplete multi-key request is already checked.
  wire::parse_progress progress_;
  std::optional<wire::dialect> dialect_;
  bool expect_validate_ = false;
  bool closing_ = false, closed_ = false;
  bool handling_ = false;  // inside process(): replies wait for its end
  std::string pending_;
  std::size_t in_flight_ = 0;
  std::vector<wait_handle> waits_;  // may hold finished ones (see keep_wait)
  std::size_t waits_kept_ = 0;
  std::vector<std::uint64_t> watch_ids_;
  std::map<std::string, std::string> wills_;
};

}  // namespace dtrun::rendezvous
