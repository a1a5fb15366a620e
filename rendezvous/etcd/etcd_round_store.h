// The rendezvous' store on an etcd v3 cluster (--rdzv-backend=etcd-v3):
// round_store's operations as etcd transactions through the JSON gateway.
//
//   SET          put
//   GET / WAIT   range; if a key is missing, a watch from the range's
//                revision until it is put (no polling)
//   ADD          compare-and-swap on the key's mod revision, retried on a
//                race; the same transaction records "<seq> <result>" in a
//                per-client key bound to the agent's lease, so after a
//                connection drop the client can tell whether it applied
//   COMPARE_SET  one transaction (CREATE revision 0 or VALUE equal)
//   last will    a key bound to the agent's lease; every member of the
//                round watches the round's wills for deletes and sets the
//                target when a will with text vanishes (lease expired)
//
// Idempotent calls are retried on another member until the request
// timeout; a lost lease fails every call with the reason.
#pragma once

#include <memory>

#include <boost/asio/io_context.hpp>

#include "rendezvous/etcd/etcd_session.h"
#include "rendezvous/store/round_store.h"

namespace dtrun::rendezvous {

// A factory of etcd clients that share one agent session (lease).
round_store_factory etcd_round_store_factory(boost::asio::io_context& io,
                                             std::shared_ptr<etcd_session> session);

}  // namespace dtrun::rendezvous
