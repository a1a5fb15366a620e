// Text from outside dtrun (workers' error files, store keys and values,
// peers' messages) made safe to put in dtrun's own log lines and
// summaries: a control character or a byte that is not UTF-8 can neither
// move the cursor, recolour the terminal nor start a forged line.
// Workers' own stdout/stderr never go through here; they pass untouched.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace dtrun {

// Escapes C0 controls and DEL (\n, \r, \t, \xNN), C1 controls encoded in
// UTF-8 (\u0080-\u009f), the characters that reorder, hide or break the
// text around them (bidirectional overrides, zero-width characters, line
// and paragraph separators: \u202e ...) and bytes that are not valid
// UTF-8 (\xNN). A
// backslash stays as it is; printable ASCII and valid UTF-8 pass through.
// With keep_newlines, '\n' is kept (multi-line text such as a traceback,
// which the caller indents line by line).
std::string printable(std::string_view text, bool keep_newlines = false);

// printable() of at most the first `max_bytes` of `text`, followed by
// "... (N bytes)" when it was longer: a user's line quoted in a one-line
// error stays one readable line however long the line was.
std::string printable_excerpt(std::string_view text, std::size_t max_bytes = 200);

}  // namespace dtrun
