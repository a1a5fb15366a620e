// etcd_parse: replies recorded from etcd 3.4 read right; replies of any
// other shape are an error saying which field is wrong, never an exception.
#include <catch2/catch.hpp>

#include "rendezvous/etcd/etcd_parse.h"

using namespace dtrun::rendezvous;
using Catch::Matchers::Contains;

TEST_CASE("etcd's own replies parse into what dtrun reads") {
  etcd_txn txn;
  REQUIRE(parse_txn(R"({"header":{"cluster_id":"14841639068965178418","revision":"9"},)"
                    R"("succeeded":true,"responses":[{"response_range":{"header":{"revision":"9"},)"
                    R"("kvs":[{"key":"YQ==","create_revision":"4","mod_revision":"9",)"
                    R"("version":"3","value":"dg=="}],"count":"1"}},)"
                    R"({"response_put":{"header":{"revision":"9"},"prev_kv":{"key":"YQ==","version":"2"}}}]})",
                    txn) == "");
  CHECK(txn.succeeded);
  CHECK(txn.revision == 9);
  REQUIRE(txn.responses.size() == 2);
  REQUIRE(txn.responses[0].range);
  CHECK(txn.responses[0].range->count == 1);
  CHECK(txn.responses[0].range->kvs.at(0).value == "v");
  CHECK(txn.responses[0].range->kvs.at(0).version == 3);
  REQUIRE(txn.responses[1].put_prev_kv);
  CHECK(txn.responses[1].put_prev_kv->version == 2);

  // The loser of a compare has no `succeeded` at all (proto3 omits false).
  REQUIRE(parse_txn(R"({"header":{"revision":"9"}})", txn) == "");
  CHECK_FALSE(txn.succeeded);

  std::string id;
  REQUIRE(parse_lease_grant(R"({"header":{},"ID":"7587862072423915019","TTL":"10"})", id) == "");
  CHECK(id == "7587862072423915019");

  std::int64_t ttl = -1;
  REQUIRE(parse_keepalive(R"({"result":{"header":{},"ID":"7","TTL":"10"}})", ttl) == "");
  CHECK(ttl == 10);
  // A lost lease answers 200 without a TTL.
  REQUIRE(parse_keepalive(R"({"result":{"header":{},"ID":"7"}})", ttl) == "");
  CHECK(ttl == 0);

  etcd_watch_message w;
  REQUIRE(parse_watch_message(R"({"result":{"header":{"revision":"5"},"events":[{"type":"DELETE",)"
                              R"("kv":{"key":"YQ==","mod_revision":"5"},"prev_kv":{"key":"YQ==","value":"eA=="}},)"
                              R"({"kv":{"key":"Yg==","value":"dg==","mod_revision":"6"}}]}})",
                              w) == "");
  REQUIRE(w.events.size() == 2);
  CHECK(w.events[0].deleted);
  CHECK(w.events[0].prev_value == "x");
  CHECK(w.events[1].key == "b");
  CHECK(w.events[1].value == "v");
  CHECK(w.events[1].revision == 6);
  REQUIRE(parse_watch_message(R"({"result":{"canceled":true,"compact_revision":"40"}})", w) == "");
  CHECK(w.canceled);
  CHECK(w.compact_revision == 40);
}

TEST_CASE("etcd: the replies of the adversarial pass are errors that name the wrong field") {
  std::string id;
  CHECK(parse_lease_grant("[]", id) == "the reply is a list, not an object");
  CHECK(parse_lease_grant(R"({"ID":"12x"})", id) == "`ID` is \"12x\", not a 64-bit integer");
  CHECK(parse_lease_grant(R"({"ID":"0"})", id) == "it holds no lease ID");
  std::int64_t ttl = 0;
  CHECK(parse_keepalive(R"({"result":[1,2]})", ttl) == "`result` is a list, not an object");
  CHECK(parse_keepalive(R"({"result":{"TTL":true}})", ttl) == "`result.TTL` is true/false, not an integer");
  etcd_txn txn;
  CHECK(parse_txn(R"({"succeeded":"yes"})", txn) == "`succeeded` is a string, not true or false");
  CHECK(parse_txn(R"({"responses":[{"response_range":{"kvs":[{"value":"%%%%"}]}}]})", txn) ==
        "`responses[0].response_range.kvs[0].value` is not base64");
  CHECK(parse_txn(R"({"responses":{}})", txn) == "`responses` is an object, not a list");
  etcd_watch_message w;
  CHECK(parse_watch_message(R"({"result":{"events":[{"kv":5}]}})", w) ==
        "`result.events[0].kv` is a number, not an object");
  CHECK(parse_watch_message(R"({"result":{"events":[{"type":"BOOM","kv":{}}]}})", w) ==
        "`result.events[0].type` is \"BOOM\", not PUT or DELETE");
  CHECK_THAT(parse_watch_message(R"({"error":{"grpc_code":14,"message":"no leader"}})", w),
             Contains("no leader"));
  etcd_range range;
  CHECK(parse_range("not json", range) == "the reply is not JSON");
  CHECK(parse_range(R"({"count":"18446744073709551616"})", range) ==
        "`count` is \"18446744073709551616\", not a 64-bit integer");
  CHECK(parse_range(R"({"count":18446744073709551615})", range) ==
        "`count` is 18446744073709551615, beyond a 64-bit integer");
  std::int64_t deleted = 0;
  CHECK(parse_delete(R"({"deleted":[]})", deleted) == "`deleted` is a list, not an integer");
}
