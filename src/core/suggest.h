// "Did you mean ...?": the nearest known name to a mistyped one (subcommands, options, config fields).
#pragma once

#include <string>
#include <vector>

namespace zaya {

// The candidate nearest to `word` by edit distance (case-insensitive), when it is within about a third of
// the word's length (at least 2 edits), or that abbreviates it by initials ("lr" for "learning_rate"); ""
// when none is that near.
std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates);

// " (did you mean 'PREFIX+X'?)" for the nearest candidate X, or "" when none is near.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates,
                         const std::string& prefix = "");

}  // namespace zaya
