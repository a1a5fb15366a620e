#include "rendezvous/store/round_store.h"

#include <set>
#include <utility>

#include <fmt/format.h>

namespace dtrun::rendezvous {

// The one place that learns an error's class by rethrowing it; results
// carry the answer in `kind`.
store_error_kind kind_of(const std::exception_ptr& error) {
  if (!error) return store_error_kind::none;
  try {
    std::rethrow_exception(error);
  } catch (const store_wait_timeout&) {
    return store_error_kind::wait_timeout;
  } catch (const store_timeout&) {
    return store_error_kind::timeout;
  } catch (const store_closed_error&) {
    return store_error_kind::closed;
  } catch (const store_session_lost&) {
    return store_error_kind::session_lost;
  } catch (const store_connection_error&) {
    return store_error_kind::connection_lost;
  } catch (const store_corrupt_reply&) {
    return store_error_kind::corrupt_reply;
  } catch (...) {
    return store_error_kind::other;
  }
}

const char* describe(store_error_kind kind) {
  switch (kind) {
    case store_error_kind::none: return "no error";
    case store_error_kind::timeout: return "timeout";
    case store_error_kind::wait_timeout: return "wait timeout";
    case store_error_kind::connection_lost: return "connection lost";
    case store_error_kind::session_lost: return "session lost";
    case store_error_kind::closed: return "closed here";
    case store_error_kind::corrupt_reply: return "corrupt reply";
    case store_error_kind::other: return "store error";
  }
  return "store error";
}

std::string error_message(const std::exception_ptr& error) {
  if (!error) return {};
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown error";
  }
}

struct unheeded_writes::state {
  std::function<void(const std::string&)> log;
  std::set<std::pair<std::string, store_error_kind>> logged;
  bool silent = false;
};

unheeded_writes::unheeded_writes(std::function<void(const std::string&)> log)
    : state_(std::make_shared<state>()) {
  state_->log = std::move(log);
}

store_callback unheeded_writes::operator()(std::string what) const {
  return [s = state_, what = std::move(what)](const store_result& r) {
    // Dropped because we closed the client ourselves: nothing failed.
    if (!r.error || r.kind == store_error_kind::closed || s->silent) return;
    if (!s->logged.emplace(what, r.kind).second) return;
    if (s->log) s->log(fmt::format("could not {}: {}", what, r.message()));
  };
}

void unheeded_writes::silence() const { state_->silent = true; }
void unheeded_writes::resume() const { state_->silent = false; }

}  // namespace dtrun::rendezvous
