#include <catch2/catch.hpp>

#include <stdexcept>

#include "rendezvous/etcd/etcd_connection.h"
#include "rendezvous/etcd/etcd_options.h"

using namespace dtrun::rendezvous;

TEST_CASE("etcd members parse as --rdzv-endpoint lists them") {
  bool tls = false;
  std::string error;
  auto m = parse_etcd_members("10.0.0.1:2379, node2 ,[::1]:2380", tls, error);
  REQUIRE(m);
  REQUIRE(m->size() == 3);
  CHECK((*m)[0].host == "10.0.0.1");
  CHECK((*m)[0].port == 2379);
  CHECK((*m)[1].host == "node2");
  CHECK((*m)[1].port == etcd_default_port);
  CHECK((*m)[2].host == "::1");
  CHECK((*m)[2].port == 2380);
  CHECK_FALSE(tls);
  CHECK(members_text(*m) == "10.0.0.1:2379,node2:2379,[::1]:2380");
}

TEST_CASE("an https:// member turns TLS on; mixed schemes are refused") {
  bool tls = false;
  std::string error;
  auto m = parse_etcd_members("https://e1:2379/,https://e2", tls, error);
  REQUIRE(m);
  CHECK(tls);
  CHECK((*m)[1].host == "e2");
  tls = false;
  CHECK_FALSE(parse_etcd_members("https://e1,http://e2", tls, error));
  CHECK(error.find("mix http:// and https://") != std::string::npos);
}

TEST_CASE("malformed or empty member lists are one clear error") {
  bool tls = false;
  std::string error;
  CHECK_FALSE(parse_etcd_members("", tls, error));
  CHECK(error.find("no etcd member") != std::string::npos);
  CHECK_FALSE(parse_etcd_members(" , ", tls, error));
  CHECK_FALSE(parse_etcd_members("e1:99999", tls, error));
  CHECK(error.find("'e1:99999'") != std::string::npos);
  CHECK_FALSE(parse_etcd_members("e1:0", tls, error));
  CHECK_FALSE(parse_etcd_members("[::1:2379", tls, error));
}

TEST_CASE("base64 carries any bytes both ways, padding included") {
  for (std::string bytes : {std::string(), std::string("a"), std::string("ab"),
                            std::string("abc"), std::string("/dtrun/job/r/0/node/12"),
                            std::string("\0\xff\n\x80", 4)}) {
    auto text = base64_encode(bytes);
    CHECK(text.size() % 4 == 0);
    auto back = base64_decode(text);
    REQUIRE(back);
    CHECK(*back == bytes);
  }
  CHECK(base64_encode("ab") == "YWI=");
  CHECK_FALSE(base64_decode("abc"));    // not a multiple of 4
  CHECK_FALSE(base64_decode("a*c="));   // not the alphabet
}

TEST_CASE("TLS settings name the file that cannot be used") {
  etcd_options o;
  CHECK(make_etcd_tls(o) == nullptr);  // plain http
  o.tls = true;
  o.cacert = "/nonexistent/ca.pem";
  try {
    make_etcd_tls(o);
    FAIL("a missing CA file was accepted");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()).find("/nonexistent/ca.pem") != std::string::npos);
  }
  o.cacert.clear();
  o.cert = "/nonexistent/cert.pem";
  CHECK_THROWS_WITH(make_etcd_tls(o), Catch::Contains("cert and key go together"));
}
