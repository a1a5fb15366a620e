// The blocking client's deadlines with timeouts at the ends of their range:
// whatever a caller passes must neither overflow the clock nor hang.
#include <catch2/catch.hpp>

#include "rendezvous/store/tcp_store_client.h"
#include "server_fixture.h"

using namespace dtrun::rendezvous;
using namespace std::chrono_literals;

TEST_CASE("the blocking client treats timeouts beyond the clock's range as no timeout") {
  testing::server_thread server;
  tcp_store_client_options options;
  options.port = server.port();
  options.timeout = std::chrono::milliseconds::max();
  options.connect_timeout = std::chrono::milliseconds::max();
  tcp_store_client c(options);
  c.set("k", "v");
  CHECK(c.get("k") == "v");
  c.wait({"k"}, std::chrono::milliseconds::max());
}

TEST_CASE("the blocking client's zero and negative waits time out and keep the connection") {
  testing::server_thread server;
  tcp_store_client_options options;
  options.port = server.port();
  tcp_store_client c(options);
  CHECK_THROWS_AS(c.wait({"never"}, 0ms), store_timeout);
  CHECK_THROWS_AS(c.wait({"never"}, std::chrono::milliseconds::min()), store_timeout);
  c.set("after", "ok");
  CHECK(c.get("after") == "ok");
}
