// Hints for the mistakes people make on dtrun's command line: a word that
// is close to a subcommand or a flag (a typo), Python named as the script,
// a dtrun flag written after the script. Pure functions over words, so the
// CLI's messages stay one line and the rules can be tested alone.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrun::launcher {

// The commands of their own that dtrun takes as its first word.
const std::vector<std::string>& subcommands();

// Optimal-string-alignment distance: insertions, deletions, substitutions
// and swaps of two neighbours each cost 1 ("statuss"/"status": 1).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate a typo most likely meant: at most 2 edits away (1 for
// words under 5 letters), or a longer candidate that starts with the word
// less a plural 's' ("--nprocs" -> "--nproc-per-node"). '_' and '-' count
// as the same. nullopt when none is close.
std::optional<std::string> nearest_word(const std::string& word,
                                        const std::vector<std::string>& candidates);

// "python", "python3", "python3.11", "/usr/bin/python3": a Python
// interpreter given where the script goes.
bool names_a_python_interpreter(const std::string& word);

// The torchrun flags (both spellings) that a script is unlikely to take
// itself: written after the script they were probably meant for dtrun.
// Returns those of `script_args`, as written (up to any '=').
std::vector<std::string> launcher_flags_among(const std::vector<std::string>& script_args);

}  // namespace dtrun::launcher
