#include "io/model_inputs.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/strict_json.h"

namespace zaya {

using json = nlohmann::json;

namespace {

// A [rows][cols] integer matrix; every row the same length.
void read_matrix(const json& j, const std::string& src, const std::string& field, std::vector<int32_t>* out,
                 int64_t* rows, int64_t* cols) {
  ZAYA_CHECK(j.is_array() && !j.empty(), src, ": field '", field, "' must be a non-empty list of rows");
  *rows = int64_t(j.size());
  *cols = -1;
  out->clear();
  for (size_t r = 0; r < j.size(); r++) {
    ZAYA_CHECK(j[r].is_array(), src, ": field '", field, "[", r, "]' must be a list of integers");
    if (*cols < 0) *cols = int64_t(j[r].size());
    ZAYA_CHECK(int64_t(j[r].size()) == *cols, src, ": field '", field, "' has rows of different lengths (",
               *cols, " and ", j[r].size(), "); left-pad them and give an attention_mask");
    for (size_t c = 0; c < j[r].size(); c++) {
      const json& v = j[r][c];
      ZAYA_CHECK(v.is_number_integer() && v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX, src,
                 ": field '", field, "[", r, "][", c, "]' must be a 32-bit integer, got ", v.dump());
      out->push_back(int32_t(v.get<int64_t>()));
    }
  }
  ZAYA_CHECK(*cols > 0, src, ": field '", field, "' has empty rows");
}

}  // namespace

ModelInputs parse_model_inputs(const std::string& text, const std::string& src) {
  json j = parse_json_strict(text.data(), text.size(), src);
  ZAYA_CHECK(j.is_object(), src, ": expected a JSON object with 'input_ids'");
  ModelInputs in;
  if (j.contains("input_ids")) read_matrix(j["input_ids"], src, "input_ids", &in.input_ids, &in.B, &in.S);
  auto same_shape = [&](const char* field, std::vector<int32_t>* out) {
    int64_t r, c;
    read_matrix(j[field], src, field, out, &r, &c);
    ZAYA_CHECK(r == in.B && c == in.S, src, ": field '", field, "' is [", r, ", ", c, "] but input_ids is [",
               in.B, ", ", in.S, "]");
  };
  if (j.contains("targets") && !j["targets"].is_null()) {
    ZAYA_CHECK(in.B > 0, src, ": 'targets' given without 'input_ids'");
    same_shape("targets", &in.targets);
  }
  if (j.contains("attention_mask") && !j["attention_mask"].is_null()) {
    ZAYA_CHECK(in.B > 0, src, ": 'attention_mask' given without 'input_ids'");
    same_shape("attention_mask", &in.attention_mask);
    for (int32_t m : in.attention_mask)
      ZAYA_CHECK(m == 0 || m == 1, src, ": 'attention_mask' entries must be 0 or 1");
  }
  if (j.contains("generation") && !j["generation"].is_null()) {
    const json& g = j["generation"];
    ZAYA_CHECK(g.is_object(), src, ": field 'generation' must be an object");
    if (g.contains("prompt_ids"))
      read_matrix(g["prompt_ids"], src, "generation.prompt_ids", &in.prompt_ids, &in.gen_B, &in.gen_S);
    if (g.contains("max_new_tokens")) {
      ZAYA_CHECK(g["max_new_tokens"].is_number_integer() && g["max_new_tokens"].get<int64_t>() >= 0, src,
                 ": field 'generation.max_new_tokens' must be a non-negative integer");
      in.max_new_tokens = g["max_new_tokens"].get<int64_t>();
    }
  }
  ZAYA_CHECK(in.B > 0 || in.gen_B > 0, src, ": needs 'input_ids' or 'generation.prompt_ids'");
  return in;
}

ModelInputs load_model_inputs(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  ZAYA_CHECK(f.good(), path, ": cannot open the inputs file");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_model_inputs(ss.str(), path);
}

}  // namespace zaya
