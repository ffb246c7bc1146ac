// GSM8K answer handling as lm_eval/tasks/gsm8k/gsm8k.yaml (version 3.0) defines it: the generation is cut
// at the first stop sequence, two filters extract the answer (lm_eval/filters/extraction.py RegexFilter +
// take_first), and exact_match compares after the metric's regexes_to_ignore and ignore_case
// (lm_eval/api/metrics.py exact_match_hf_evaluate).
#pragma once

#include <string>
#include <vector>

namespace zaya::eval {

// The text before the earliest occurrence of any non-empty stop sequence (lm-eval's HF backend splits on
// each `until` string in turn and keeps the part before it, which comes to the same).
std::string truncate_at_stop_sequences(const std::string& generation, const std::vector<std::string>& until);

// "strict-match": the first match of `#### (\-?[0-9\.\,]+)`, its group, stripped; "[invalid]" when none.
std::string gsm8k_strict_match(const std::string& response);
// "flexible-extract": the last match of `(-?[$0-9.,]{2,})|(-?[0-9]+)` (group_select -1), its first
// non-empty group, stripped; "[invalid]" when none.
std::string gsm8k_flexible_extract(const std::string& response);

// exact_match's normalisation, applied to prediction and reference alike: remove ",", "$", everything up
// to and including the last "#### " (`(?s).*#### `), a "." at the end (`\.$`: before a final "\n" too),
// then lowercase (ASCII; numpy lowercases all of Unicode).
std::string gsm8k_normalize(const std::string& text);

// 1.0 when gsm8k_normalize(prediction) == gsm8k_normalize(reference), else 0.0.
double gsm8k_exact_match(const std::string& prediction, const std::string& reference);

}  // namespace zaya::eval
