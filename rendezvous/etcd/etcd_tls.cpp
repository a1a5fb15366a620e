// The TLS context of an etcd client (etcd_connection.h): the CA to trust,
// and a client certificate where the cluster asks for one.
#include "rendezvous/etcd/etcd_connection.h"

#include <stdexcept>

#include <boost/asio/ssl.hpp>
#include <fmt/format.h>

namespace dtrun::rendezvous {

namespace ssl = boost::asio::ssl;

std::shared_ptr<ssl::context> make_etcd_tls(const etcd_options& o) {
  if (!o.tls) return nullptr;
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
  boost::system::error_code ec;
  if (o.cacert.empty()) {
    ctx->set_default_verify_paths(ec);
  } else {
    ctx->load_verify_file(o.cacert, ec);
  }
  if (ec) {
    throw std::runtime_error(fmt::format("cannot use the etcd CA file '{}' (--rdzv-conf cacert): {}",
                                         o.cacert, ec.message()));
  }
  if (o.cert.empty() != o.key.empty()) {
    throw std::runtime_error(
        "--rdzv-conf cert and key go together: give both (a client certificate) or neither");
  }
  if (!o.cert.empty()) {
    ctx->use_certificate_chain_file(o.cert, ec);
    if (ec) {
      throw std::runtime_error(fmt::format(
          "cannot use the etcd client certificate '{}' (--rdzv-conf cert): {}", o.cert,
          ec.message()));
    }
    ctx->use_private_key_file(o.key, ssl::context::pem, ec);
    if (ec) {
      throw std::runtime_error(fmt::format(
          "cannot use the etcd client key '{}' (--rdzv-conf key): {}", o.key, ec.message()));
    }
  }
  ctx->set_verify_mode(ssl::verify_peer);
  return ctx;
}

}  // namespace dtrun::rendezvous
