#include "rendezvous/algorithm/rendezvous_handler.h"

namespace dtrun::rendezvous {

// Out of line: the interface's one definition, where its vtable lives.
rendezvous_handler::~rendezvous_handler() = default;

}  // namespace dtrun::rendezvous
