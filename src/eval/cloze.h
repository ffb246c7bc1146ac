// A cloze task built from held-out text, so that a model trained on a corpus of its own (the main job's
// Brown) reports a task accuracy, not only a loss: each item is a passage of `context_words` words and the
// word that follows it, against `choices - 1` other words drawn uniformly from the text's common words (seen
// at least `min_count` times). Chance is 1 / choices; a model that learned anything of the language beats it.
// Items are written in the generic task schema (eval/tasks.h: {"context", "choices", "gold"}), so `zaya eval
// run` and training's eval.tasks score them like any other multiple-choice task (acc, acc_norm).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zaya::eval {

struct ClozeOptions {
  int64_t items = 200;
  int64_t choices = 4;
  int64_t context_words = 24;
  int64_t min_count = 5;  // a word is a candidate (answer or distractor) when the text has it this often
  uint64_t seed = 1;
};

// Items from `documents` (plain text; words are runs of non-space characters, a candidate word is made of
// letters only, at least 2). Deterministic for a seed (std::mt19937_64, no library distributions). Throws
// zaya::Error when the text has too few candidates for the items asked.
std::vector<nlohmann::json> build_cloze_items(const std::vector<std::string>& documents,
                                              const ClozeOptions& options);

}  // namespace zaya::eval
