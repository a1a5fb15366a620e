// Python's string.Template.safe_substitute, which torchrun applies in two
// places: the line prefix template (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)
// and the `${local_rank}` macro in every worker argument
// (torch.distributed.elastic.utils.api.macros.substitute).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace dtrun::agent {

// Returns the value of a template variable, nullopt for a name it does not
// know (kept as written).
using template_lookup = std::function<std::optional<std::string>(std::string_view name)>;

// `text` with `$name` and `${name}` replaced where `lookup` knows the name,
// "$$" turned into "$" (kept as "$$" when !collapse_escapes; either way it
// protects what follows: "$${name}" is never replaced), and everything else
// (unknown names, a lone "$", an unclosed "${") kept as written. Names are
// Python's identifiers ([_A-Za-z][_A-Za-z0-9]*, ASCII), matched greedily:
// "$local_rankX" names "local_rankX".
std::string safe_substitute(std::string_view text, const template_lookup& lookup,
                            bool collapse_escapes = true);

// torchrun's macros.substitute for one worker argument: `${local_rank}` and
// `$local_rank` become `local_rank`. Unlike torchrun, "$$" stays "$$":
// torchrun's safe_substitute turns it into "$" in every argument, which
// breaks `--no-python sh -c 'kill $$'`; dtrun only honours it as the escape
// ("$${local_rank}" is left alone).
std::string substitute_local_rank_macro(std::string_view arg, int local_rank);

}  // namespace dtrun::agent
