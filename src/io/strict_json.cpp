#include "io/strict_json.h"

#include <cstring>
#include <set>
#include <vector>

#include "core/error.h"

namespace zaya {

nlohmann::json parse_json_strict(const char* text, size_t size, const std::string& what) {
  // One key set per open object; the parser reports keys of the innermost open object.
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto track_keys = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (event == E::object_start) {
      open_objects.emplace_back();
    } else if (event == E::object_end) {
      if (!open_objects.empty()) open_objects.pop_back();
    } else if (event == E::key && !open_objects.empty() && duplicate.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second) duplicate = key;
    }
    return true;
  };
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore anything after it; JSON
  // text can never contain a raw NUL, so reject it outright.
  const void* nul = std::memchr(text, 0, size);
  ZAYA_CHECK(nul == nullptr, what, " is not valid JSON: NUL byte at offset ",
             static_cast<const char*>(nul) - text);
  nlohmann::json value;
  try {
    value = nlohmann::json::parse(text, text + size, track_keys);
  } catch (const nlohmann::json::exception& e) {
    fail(str_cat(what, " is not valid JSON: ", e.what()));
  }
  ZAYA_CHECK(duplicate.empty(), what, " repeats the key '", duplicate, "' in one object");
  return value;
}

std::string json_type_phrase(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
      return str_cat("the integer ", v.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return str_cat("the integer ", v.get<uint64_t>());
    case nlohmann::json::value_t::number_float:
      return str_cat("the non-integer number ", v.dump());
    case nlohmann::json::value_t::binary:
      return "binary data";
    case nlohmann::json::value_t::discarded:
      return "a discarded value";
  }
  return "an unknown value";
}

}  // namespace zaya
