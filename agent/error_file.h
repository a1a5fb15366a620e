// The error file a worker may leave at TORCHELASTIC_ERROR_FILE (torch's
// @record decorator writes it when the worker dies of an exception).
#pragma once

#include <optional>
#include <string>

namespace dtrun::agent {

// The error message in the file at `path`: {"message": "..."} or
// {"message": {"message": "...", "extraInfo": {...}}}. nullopt when the
// file is missing or not in either shape.
std::optional<std::string> read_error_file(const std::string& path);

}  // namespace dtrun::agent
