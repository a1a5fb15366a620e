// Event logs written before round records (issue 47): their
// `membership_change` events carry only the sentence of the round's end,
// so `dtrun report` reads an old log's class from those words. The one
// place in dtrun that reads a sentence back; every log written since has
// the event's `record` (rendezvous/record/round_record.h), which the
// report reads instead.
#pragma once

#include <string>
#include <string_view>

#include "rendezvous/record/failure_class.h"

namespace dtrun::launcher {

// The class of a round's end as an older dtrun worded it ("node 2
// (10.0.0.3) was lost", "... left the job: ...", "a node is waiting to
// join", "node 1: worker rank 3 exited with code 1 [exception:TypeError]").
// `exception` gets the type when the tag has one.
records::failure_class class_of_legacy_round_end(std::string_view reason,
                                                 std::string* exception = nullptr);

}  // namespace dtrun::launcher
