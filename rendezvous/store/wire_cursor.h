// The wire codec's reader of byte buffers, shared by its request side
// (wire_codec.cpp) and its reply side (wire_reply.cpp). Internal to
// rendezvous/store.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "rendezvous/store/wire_codec.h"

namespace dtrun::rendezvous::wire {

// Walks a byte buffer field by field. Every read either succeeds or leaves
// the cursor "short" (more bytes needed) or "bad" (a cap was exceeded); the
// caller checks once at the end, which keeps the per-command code linear.
class cursor {
 public:
  cursor(std::span<const std::uint8_t> in, const limits& caps, std::size_t start = 0)
      : in_(in), caps_(caps), pos_(start) {}

  bool ok() const { return !short_ && error_.empty(); }
  bool is_short() const { return short_; }
  const std::string& error() const { return error_; }
  std::size_t position() const { return pos_; }
  std::size_t wanted() const { return wanted_; }

  template <typename T>
  T value() {
    T v{};
    if (!ok()) return v;
    if (!take(sizeof(T))) return v;
    std::memcpy(&v, in_.data() + pos_ - sizeof(T), sizeof(T));
    return v;
  }

  // A u64 length followed by that many bytes, capped by `cap`.
  std::string bytes(std::uint64_t cap, const char* what) {
    auto len = skip(cap, what);
    if (!ok()) return {};
    return std::string(reinterpret_cast<const char*>(in_.data() + pos_ - len), len);
  }

  // The same checks as bytes(), without copying; returns the length.
  std::uint64_t skip(std::uint64_t cap, const char* what) {
    auto len = value<std::uint64_t>();
    if (!ok()) return 0;
    if (len > cap) {
      fail(std::string(what) + " of " + std::to_string(len) + " bytes exceeds the limit of " +
           std::to_string(cap));
      return 0;
    }
    take(len);
    return len;
  }

  std::string key() { return bytes(caps_.max_key_bytes, "key"); }
  std::string payload() { return bytes(caps_.max_value_bytes, "value"); }
  void skip_key() { skip(caps_.max_key_bytes, "key"); }
  void skip_payload() { skip(caps_.max_value_bytes, "value"); }

  std::uint64_t count() {
    auto n = value<std::uint64_t>();
    if (ok() && n > caps_.max_keys) {
      fail("key count " + std::to_string(n) + " exceeds the limit of " +
           std::to_string(caps_.max_keys));
    }
    return n;
  }

  void fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
  }

 private:
  bool take(std::uint64_t n) {
    // Written so that no sum can wrap, whatever the caps.
    if (pos_ > caps_.max_request_bytes || n > caps_.max_request_bytes - pos_) {
      fail("request larger than the limit of " + std::to_string(caps_.max_request_bytes) +
           " bytes");
      return false;
    }
    if (in_.size() - pos_ < n) {
      short_ = true;
      wanted_ = pos_ + n;
      return false;
    }
    pos_ += n;
    return true;
  }

  std::span<const std::uint8_t> in_;
  const limits& caps_;
  std::size_t pos_ = 0;
  std::size_t wanted_ = 0;
  bool short_ = false;
  std::string error_;
};

}  // namespace dtrun::rendezvous::wire
