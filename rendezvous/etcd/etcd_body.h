// The body of an etcd gateway reply as Beast reads it, bounded by a cap we
// check ourselves (etcd_connection.h): a Content-Length above it fails
// before anything is read or reserved, and so does the byte that would
// pass it. Beast's own body_limit is not relied upon: 1.74 loses its error
// when the header and the first body bytes arrive in one read. With
// `on_line` set it is a stream (a watch, chunked or not): each complete line
// goes there, and only the unfinished one is kept, within the cap.
//
// Header-only, without sockets, so the reply fuzzer (tests/fuzz) feeds it
// raw HTTP through Beast's parser.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <boost/beast/core/buffers_range.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/optional.hpp>

namespace dtrun::rendezvous {

struct capped_body {
  struct value_type {
    std::string text;
    std::size_t cap = 0;
    std::function<void(std::string_view)> on_line;
  };

  class reader {
   public:
    template <bool is_request, class Fields>
    reader(boost::beast::http::header<is_request, Fields>&, value_type& body) : body_(body) {}

    void init(const boost::optional<std::uint64_t>& length, boost::system::error_code& ec) {
      ec = {};
      // A stream's length does not matter, only its lines'.
      if (!body_.on_line && length && *length > body_.cap) {
        ec = boost::beast::http::error::body_limit;
      }
    }

    template <class Buffers>
    std::size_t put(const Buffers& buffers, boost::system::error_code& ec) {
      ec = {};
      std::size_t n = 0;
      for (auto b : boost::beast::buffers_range_ref(buffers)) {
        // A stream holds at most the unfinished line (plus one read).
        if (!body_.on_line && body_.text.size() + b.size() > body_.cap) {
          ec = boost::beast::http::error::body_limit;
          return n;
        }
        body_.text.append(static_cast<const char*>(b.data()), b.size());
        n += b.size();
        if (!body_.on_line) continue;
        split_lines();
        if (body_.text.size() > body_.cap) {
          ec = boost::beast::http::error::body_limit;
          return n;
        }
      }
      return n;
    }

    void finish(boost::system::error_code& ec) { ec = {}; }

   private:
    void split_lines() {
      std::size_t start = 0;
      for (auto nl = body_.text.find('\n'); nl != std::string::npos;
           nl = body_.text.find('\n', start)) {
        body_.on_line(std::string_view(body_.text).substr(start, nl - start));
        start = nl + 1;
      }
      body_.text.erase(0, start);
    }

    value_type& body_;
  };
};

}  // namespace dtrun::rendezvous
