#include "tokenizer/json_field.h"

#include "core/error.h"

namespace zaya {

void fail_field(const std::string& file, const std::string& path, const std::string& what) {
  zaya::fail(str_cat(file, ": field '", path.empty() ? "(root)" : path, "': ", what));
}

void JsonField::fail(const std::string& what) const {
  fail_field(*file_, path_, what);
}

JsonField JsonField::at(const std::string& key) const {
  if (!value_->is_object()) fail(str_cat("expected an object, got ", type_name()));
  auto it = value_->find(key);
  std::string child = path_.empty() ? key : path_ + "." + key;
  if (it == value_->end()) zaya::fail(str_cat(*file_, ": field '", child, "' is missing"));
  return JsonField(*it, *file_, child);
}

std::optional<JsonField> JsonField::find(const std::string& key) const {
  if (!value_->is_object()) fail(str_cat("expected an object, got ", type_name()));
  auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return std::nullopt;
  return JsonField(*it, *file_, path_.empty() ? key : path_ + "." + key);
}

JsonField JsonField::at(size_t i) const {
  if (!value_->is_array()) fail(str_cat("expected an array, got ", type_name()));
  if (i >= value_->size()) fail(str_cat("index ", i, " is out of range (size ", value_->size(), ")"));
  return JsonField((*value_)[i], *file_, path_ + "[" + std::to_string(i) + "]");
}

size_t JsonField::array_size() const {
  if (!value_->is_array()) fail(str_cat("expected an array, got ", type_name()));
  return value_->size();
}

std::string JsonField::str() const {
  if (!value_->is_string()) fail(str_cat("expected a string, got ", type_name()));
  return value_->get<std::string>();
}

bool JsonField::boolean() const {
  if (!value_->is_boolean()) fail(str_cat("expected true or false, got ", type_name()));
  return value_->get<bool>();
}

int64_t JsonField::integer() const {
  if (value_->is_number_unsigned()) {
    uint64_t v = value_->get<uint64_t>();
    if (v > uint64_t(INT64_MAX)) fail(str_cat("integer ", v, " is too large"));
    return int64_t(v);
  }
  if (!value_->is_number_integer()) fail(str_cat("expected an integer, got ", type_name()));
  return value_->get<int64_t>();
}

bool JsonField::bool_or(const std::string& key, bool fallback) const {
  auto f = find(key);
  return f ? f->boolean() : fallback;
}

}  // namespace zaya
