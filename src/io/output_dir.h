// Output directories of the commands that write a model (`zaya init`, `zaya export`, the trainer's
// <out>/model): a directory that already holds files is not written over by accident, and a replaced model
// leaves none of the previous one's files behind (a stale tokenizer.json of another vocabulary beside a new
// model would load without complaint and produce nonsense).
#pragma once

#include <string>
#include <vector>

namespace zaya {

// Throws zaya::Error when `dir` exists and holds anything (or is not a directory), naming it, a few of its
// entries and the ways on: another directory, or `overwrite_flag` (e.g. "--overwrite"). Creates nothing.
// Does nothing when `overwrite` is set or `dir` is missing or empty. `what` names the option ("--out").
void check_output_dir(const std::string& dir, const std::string& what, bool overwrite,
                      const std::string& overwrite_flag = "--overwrite");

// Removes the files of a Hugging Face checkpoint from `dir`: config.json, generation_config.json,
// *.safetensors, model.safetensors.index.json, tokenizer.json, tokenizer_config.json,
// special_tokens_map.json. Other files stay. Returns the names removed (nothing when `dir` is missing).
std::vector<std::string> remove_model_files(const std::string& dir);

}  // namespace zaya
