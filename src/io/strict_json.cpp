#include "io/strict_json.h"

#include <cstring>
#include <set>
#include <vector>

#include "core/error.h"

namespace zaya {

namespace {

// A SAX pass that builds nothing and only watches object keys. (nlohmann's parse callback would do
// this in the same pass, but its DOM builder rescans the parent object at every object end, which
// is quadratic in the number of tensors: seconds for a 12k-tensor header.)
struct DuplicateKeyFinder : nlohmann::json_sax<nlohmann::json> {
  std::vector<std::set<std::string>> open_objects;  // key sets of the objects being parsed
  std::string duplicate;
  std::string error;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open_objects.emplace_back();
    return true;
  }
  bool key(string_t& key) override {
    if (open_objects.back().insert(key).second) return true;
    duplicate = key;
    return false;  // stop: the document is rejected anyway
  }
  bool end_object() override {
    open_objects.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    error = ex.what();
    return false;
  }
};

}  // namespace

nlohmann::json parse_json_strict(const char* text, size_t size, const std::string& what) {
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore anything after it; JSON
  // text can never contain a raw NUL, so reject it outright. (An empty input may come as a null pointer,
  // e.g. an empty vector's data(): memchr must not see it.)
  const void* nul = size > 0 ? std::memchr(text, 0, size) : nullptr;
  ZAYA_CHECK(nul == nullptr, what, " is not valid JSON: NUL byte at offset ",
             static_cast<const char*>(nul) - text);
  DuplicateKeyFinder finder;
  nlohmann::json::sax_parse(text, text + size, &finder);
  ZAYA_CHECK(finder.error.empty(), what, " is not valid JSON: ", finder.error);
  ZAYA_CHECK(finder.duplicate.empty(), what, " repeats the key '", finder.duplicate, "' in one object");
  try {
    return nlohmann::json::parse(text, text + size);
  } catch (const nlohmann::json::exception& e) {  // unreachable after a clean SAX pass; kept for safety
    fail(str_cat(what, " is not valid JSON: ", e.what()));
  }
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
