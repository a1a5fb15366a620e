#include "rendezvous/etcd/etcd_parse.h"

#include <openssl/evp.h>

#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "rendezvous/base/parse_whole.h"

namespace dtrun::rendezvous {

using json = nlohmann::json;

namespace {

// Thrown inside this file only, caught by each parse_*: a reader deep in a
// reply stops at the first wrong field without checking every return.
struct shape_error {
  std::string what;
};

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "a list";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "true/false";
    case json::value_t::binary: return "binary";
    case json::value_t::discarded: return "not JSON";
    default: return "a number";
  }
}

[[noreturn]] void wrong(const std::string& path, const json& j, const char* expected) {
  throw shape_error{fmt::format("`{}` is {}, not {}", path, type_name(j), expected)};
}

// A field of an object, or null when absent (etcd omits defaults).
const json& field(const json& object, const char* name) {
  static const json absent;
  auto it = object.find(name);
  return it == object.end() ? absent : *it;
}

const json& object_at(const json& j, const std::string& path) {
  if (!j.is_null() && !j.is_object()) wrong(path, j, "an object");
  return j;
}

std::int64_t int64_at(const json& j, const std::string& path) {
  if (j.is_null()) return 0;
  if (j.is_number_integer() && !j.is_number_unsigned()) return j.get<std::int64_t>();
  if (j.is_number_unsigned()) {
    auto u = j.get<std::uint64_t>();
    if (u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      return static_cast<std::int64_t>(u);
    }
    throw shape_error{fmt::format("`{}` is {}, beyond a 64-bit integer", path, u)};
  }
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (auto v = parse_whole<std::int64_t>(s)) return *v;
    throw shape_error{fmt::format("`{}` is \"{}\", not a 64-bit integer", path, s.substr(0, 40))};
  }
  wrong(path, j, "an integer");
}

bool bool_at(const json& j, const std::string& path) {
  if (j.is_null()) return false;
  if (!j.is_boolean()) wrong(path, j, "true or false");
  return j.get<bool>();
}

std::string text_at(const json& j, const std::string& path) {
  if (j.is_null()) return {};
  if (!j.is_string()) wrong(path, j, "a string");
  return j.get<std::string>();
}

std::string bytes_at(const json& j, const std::string& path) {
  if (j.is_null()) return {};
  if (!j.is_string()) wrong(path, j, "base64 text");
  auto decoded = base64_decode(j.get_ref<const std::string&>());
  if (!decoded) throw shape_error{fmt::format("`{}` is not base64", path)};
  return std::move(*decoded);
}

// A list, or an empty one when absent.
const json& array_at(const json& j, const std::string& path) {
  static const json empty = json::array();
  if (j.is_null()) return empty;
  if (!j.is_array()) wrong(path, j, "a list");
  return j;
}

etcd_kv kv_at(const json& j, const std::string& path) {
  const auto& o = object_at(j, path);
  etcd_kv kv;
  if (o.is_null()) return kv;
  kv.key = bytes_at(field(o, "key"), path + ".key");
  kv.value = bytes_at(field(o, "value"), path + ".value");
  kv.create_revision = int64_at(field(o, "create_revision"), path + ".create_revision");
  kv.mod_revision = int64_at(field(o, "mod_revision"), path + ".mod_revision");
  kv.version = int64_at(field(o, "version"), path + ".version");
  // The lease may be there; dtrun does not read it, but it must be an ID.
  int64_at(field(o, "lease"), path + ".lease");
  return kv;
}

std::int64_t header_revision(const json& o, const std::string& path) {
  const auto& header = object_at(field(o, "header"), path + "header");
  if (header.is_null()) return 0;
  return int64_at(field(header, "revision"), path + "header.revision");
}

etcd_range range_at(const json& j, const std::string& path) {
  const auto& o = object_at(j, path.empty() ? "reply" : path);
  etcd_range r;
  if (o.is_null()) return r;
  auto prefix = path.empty() ? std::string() : path + ".";
  r.revision = header_revision(o, prefix);
  const auto& kvs = array_at(field(o, "kvs"), prefix + "kvs");
  for (std::size_t i = 0; i < kvs.size(); ++i) {
    r.kvs.push_back(kv_at(kvs[i], fmt::format("{}kvs[{}]", prefix, i)));
  }
  r.count = int64_at(field(o, "count"), prefix + "count");
  bool_at(field(o, "more"), prefix + "more");
  return r;
}

// The reply's text as a JSON object.
json object_of(std::string_view body) {
  auto j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw shape_error{"the reply is not JSON"};
  if (!j.is_object()) throw shape_error{fmt::format("the reply is {}, not an object", type_name(j))};
  return j;
}

template <class F>
std::string guarded(F&& f) {
  try {
    f();
    return {};
  } catch (const shape_error& e) {
    return e.what;
  } catch (const std::exception& e) {
    // Not expected (every access above is checked first); still an
    // answer about the reply, not the end of the loop.
    return fmt::format("the reply could not be read ({})", e.what());
  }
}

}  // namespace

std::string parse_range(std::string_view body, etcd_range& out) {
  return guarded([&] { out = range_at(object_of(body), ""); });
}

std::string parse_txn(std::string_view body, etcd_txn& out) {
  return guarded([&] {
    auto o = object_of(body);
    etcd_txn t;
    t.revision = header_revision(o, "");
    t.succeeded = bool_at(field(o, "succeeded"), "succeeded");
    const auto& responses = array_at(field(o, "responses"), "responses");
    for (std::size_t i = 0; i < responses.size(); ++i) {
      auto path = fmt::format("responses[{}]", i);
      const auto& r = object_at(responses[i], path);
      etcd_txn_response one;
      if (!r.is_null()) {
        if (const auto& range = field(r, "response_range"); !range.is_null()) {
          one.range = range_at(range, path + ".response_range");
        }
        if (const auto& put = object_at(field(r, "response_put"), path + ".response_put");
            !put.is_null()) {
          if (const auto& prev = field(put, "prev_kv"); !prev.is_null()) {
            one.put_prev_kv = kv_at(prev, path + ".response_put.prev_kv");
          }
        }
      }
      t.responses.push_back(std::move(one));
    }
    out = std::move(t);
  });
}

std::string parse_lease_grant(std::string_view body, std::string& id) {
  return guarded([&] {
    auto o = object_of(body);
    auto n = int64_at(field(o, "ID"), "ID");
    if (n <= 0) {
      auto error = text_at(field(o, "error"), "error");
      throw shape_error{error.empty() ? "it holds no lease ID"
                                      : fmt::format("it holds no lease ID ({})", error)};
    }
    int64_at(field(o, "TTL"), "TTL");
    id = std::to_string(n);
  });
}

std::string parse_keepalive(std::string_view body, std::int64_t& ttl) {
  return guarded([&] {
    auto o = object_of(body);
    // The gateway streams keep-alives: {"result": {...}}; some proxies
    // answer the response itself.
    const auto& wrapped = field(o, "result");
    const auto& result = wrapped.is_null() ? o : object_at(wrapped, "result");
    int64_at(field(result, "ID"), "result.ID");
    auto t = int64_at(field(result, "TTL"), "result.TTL");
    if (t < 0) throw shape_error{fmt::format("`result.TTL` is {}, below 0", t)};
    ttl = t;
  });
}

std::string parse_watch_message(std::string_view line, etcd_watch_message& out) {
  return guarded([&] {
    auto o = object_of(line);
    if (const auto& error = field(o, "error"); !error.is_null()) {
      // grpc-gateway ends a stream that failed with {"error": {...}}.
      std::string message;
      if (error.is_object()) message = text_at(field(error, "message"), "error.message");
      throw shape_error{fmt::format("the watch failed: {}",
                                    message.empty() ? std::string("no reason given") : message)};
    }
    const auto& result = object_at(field(o, "result"), "result");
    etcd_watch_message m;
    if (result.is_null()) throw shape_error{"it holds no `result`"};
    m.created = bool_at(field(result, "created"), "result.created");
    m.canceled = bool_at(field(result, "canceled"), "result.canceled");
    m.compact_revision = int64_at(field(result, "compact_revision"), "result.compact_revision");
    m.cancel_reason = text_at(field(result, "cancel_reason"), "result.cancel_reason");
    const auto& events = array_at(field(result, "events"), "result.events");
    for (std::size_t i = 0; i < events.size(); ++i) {
      auto path = fmt::format("result.events[{}]", i);
      const auto& e = object_at(events[i], path);
      if (e.is_null()) throw shape_error{fmt::format("`{}` is null, not an event", path)};
      etcd_event ev;
      auto type = text_at(field(e, "type"), path + ".type");
      if (type == "DELETE") {
        ev.deleted = true;
      } else if (!type.empty() && type != "PUT") {
        throw shape_error{fmt::format("`{}.type` is \"{}\", not PUT or DELETE", path,
                                      type.substr(0, 40))};
      }
      const auto& kv_json = field(e, "kv");
      if (!kv_json.is_object()) wrong(path + ".kv", kv_json, "an object");
      auto kv = kv_at(kv_json, path + ".kv");
      ev.key = std::move(kv.key);
      ev.value = std::move(kv.value);
      ev.revision = kv.mod_revision;
      if (const auto& prev = field(e, "prev_kv"); !prev.is_null()) {
        ev.prev_value = kv_at(prev, path + ".prev_kv").value;
      }
      m.events.push_back(std::move(ev));
    }
    out = std::move(m);
  });
}

std::string parse_delete(std::string_view body, std::int64_t& deleted) {
  return guarded([&] {
    auto o = object_of(body);
    header_revision(o, "");
    deleted = int64_at(field(o, "deleted"), "deleted");
  });
}

std::string parse_object(std::string_view body) {
  return guarded([&] { object_of(body); });
}

std::string base64_encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  if (bytes.empty()) return out;
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::optional<std::string> base64_decode(std::string_view text) {
  if (text.empty()) return std::string();
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out(3 * text.size() / 4, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the padding as zero bytes.
  std::size_t pad = text.ends_with("==") ? 2 : text.ends_with("=") ? 1 : 0;
  if (static_cast<std::size_t>(n) < pad) return std::nullopt;
  out.resize(static_cast<std::size_t>(n) - pad);
  return out;
}

etcd_http_failure describe_http_failure(int status, std::string_view text,
                                        const std::string& member) {
  auto body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    return {fmt::format("HTTP {} from {} is not JSON; is this an etcd member?", status, member),
            status >= 500};
  }
  std::string message;
  if (body.is_object()) {
    if (auto m = body.find("message"); m != body.end() && m->is_string()) {
      message = m->get<std::string>();
    } else if (auto e = body.find("error"); e != body.end() && e->is_string()) {
      message = e->get<std::string>();
    }
  }
  if (message.empty()) message = "no error message";
  bool retryable = status == 503 || status == 502 || status == 504;
  if (!retryable && body.is_object()) {
    auto code = body.find("code");
    retryable = code != body.end() && code->is_number_integer() &&
                (code->get<int>() == 14 || code->get<int>() == 4);
  }
  return {fmt::format("HTTP {}: {} ({})", status, message, member), retryable};
}

}  // namespace dtrun::rendezvous
