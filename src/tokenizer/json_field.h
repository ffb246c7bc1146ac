// Checked access to the fields of a tokenizer.json: every failure is a zaya::Error naming the file, the
// field path (e.g. "model.merges[12]") and what was expected, so a bad file never crashes the loader.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace zaya {

// Throws zaya::Error "<file>: field '<path>': <what>" (the format of every tokenizer.json error).
[[noreturn]] void fail_field(const std::string& file, const std::string& path, const std::string& what);

class JsonField {
 public:
  // file: the name used in error messages (must outlive this field and the fields made from it);
  // path: the dotted path of this value ("" for the root).
  JsonField(const nlohmann::json& value, const std::string& file, std::string path)
      : value_(&value), file_(&file), path_(std::move(path)) {}

  const nlohmann::json& raw() const { return *value_; }
  const std::string& file() const { return *file_; }
  const std::string& path() const { return path_; }
  bool is_null() const { return value_->is_null(); }

  // Required member of an object (throws when this is not an object or the key is missing).
  JsonField at(const std::string& key) const;
  // Optional member: nullopt when the key is missing or its value is null.
  std::optional<JsonField> find(const std::string& key) const;
  // Element i of an array.
  JsonField at(size_t i) const;
  // Number of elements of an array (throws when this is not an array).
  size_t array_size() const;

  std::string str() const;  // a string value
  bool boolean() const;     // a boolean value
  int64_t integer() const;  // an integer value (not a float)

  // An optional boolean member: fallback when the key is missing or null.
  bool bool_or(const std::string& key, bool fallback) const;

  // Throws zaya::Error "<file>: field '<path>': <what>".
  [[noreturn]] void fail(const std::string& what) const;
  // The JSON type name of this value, for messages ("array", "string", ...).
  const char* type_name() const { return value_->type_name(); }

 private:
  const nlohmann::json* value_;
  const std::string* file_;
  std::string path_;
};

}  // namespace zaya
