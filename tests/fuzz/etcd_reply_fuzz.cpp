// Feeds the etcd client's reading side what a member (or anything posing
// as one) could send: the input is a whole HTTP response, read by Beast's
// parser into capped_body (rendezvous/etcd/etcd_body.h) the way a connection
// reads it, once as a unary reply and once as a watch stream; the body, or
// each line of the stream, then goes through every parser of etcd_parse.
// The input is also given to the parsers as a bare body. Seeds under
// tests/fuzz/seeds/etcd_reply are replies recorded from etcd 3.4.
//
// Checked (any violation aborts; ASan/UBSan catch the rest):
//   - nothing throws out of the parsers or the body;
//   - a unary body never holds more than its cap, a stream never more than
//     the cap plus the last piece handed to it;
//   - a parser that says a reply is good filled in what it promised (a
//     grant's ID is a positive number; a keep-alive's TTL is not negative).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>

#include "rendezvous/etcd/etcd_body.h"
#include "rendezvous/etcd/etcd_parse.h"

using namespace dtrun::rendezvous;
namespace http = boost::beast::http;

namespace {

constexpr std::size_t cap = 4096;

void check(bool condition) {
  if (!condition) std::abort();
}

void every_parser(std::string_view body) {
  etcd_range range;
  parse_range(body, range);
  etcd_txn txn;
  parse_txn(body, txn);
  std::string id;
  if (parse_lease_grant(body, id).empty()) check(!id.empty() && id[0] != '-' && id != "0");
  std::int64_t ttl = -1;
  if (parse_keepalive(body, ttl).empty()) check(ttl >= 0);
  etcd_watch_message watch;
  parse_watch_message(body, watch);
  std::int64_t deleted = 0;
  parse_delete(body, deleted);
  parse_object(body);
}

void as_http(std::string_view input, bool stream) {
  http::response_parser<capped_body> parser;
  parser.body_limit(boost::none);
  parser.eager(true);
  auto& body = parser.get().body();
  body.cap = cap;
  if (stream) body.on_line = [](std::string_view line) { every_parser(line); };
  boost::system::error_code ec;
  // Beast takes what it can of the rest each time, as reads hand it over.
  std::size_t at = 0;
  while (at < input.size() && !parser.is_done()) {
    auto used = parser.put(boost::asio::buffer(input.data() + at, input.size() - at), ec);
    if (ec == http::error::need_more) ec = {};
    if (ec || used == 0) break;
    at += used;
  }
  if (!ec && !parser.is_done() && parser.is_header_done()) parser.put_eof(ec);
  if (stream) {
    check(body.text.size() <= cap + input.size());
  } else {
    check(body.text.size() <= cap);
    if (!ec && parser.is_done()) every_parser(body.text);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  every_parser(input);
  as_http(input, false);
  as_http(input, true);
  return 0;
}
