#include "data/corpus.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace zaya::data {

namespace fs = std::filesystem;

CorpusFormat parse_corpus_format(const std::string& s) {
  if (s == "text") return CorpusFormat::kText;
  if (s == "jsonl") return CorpusFormat::kJsonl;
  fail(str_cat("--format: '", s, "' is not a corpus format (expected text or jsonl)"));
}

TextDocSplit parse_text_doc_split(const std::string& s) {
  if (s == "file") return TextDocSplit::kFile;
  if (s == "paragraph") return TextDocSplit::kParagraph;
  fail(str_cat("--text-doc-split: '", s, "' is not a split (expected file or paragraph)"));
}

std::vector<std::string> list_input_files(const std::vector<std::string>& inputs) {
  ZAYA_CHECK(!inputs.empty(), "no input files given (expected --input FILE or DIR)");
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    fs::file_status st = fs::status(input, ec);
    ZAYA_CHECK(fs::exists(st), "input '", input, "' does not exist");
    if (fs::is_regular_file(st)) {
      files.push_back(input);
    } else if (fs::is_directory(st)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(input, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        std::string name = it->path().filename().string();
        if (!name.empty() && name[0] == '.') {
          if (it->is_directory()) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file()) found.push_back(it->path().string());
      }
      ZAYA_CHECK(!ec, "cannot list directory '", input, "': ", ec.message());
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else {
      fail(str_cat("input '", input, "' is neither a regular file nor a directory"));
    }
  }
  return files;
}

CorpusReader::CorpusReader(const CorpusOptions& options) : options_(options) {
  files_ = list_input_files(options.inputs);
  for (const auto& f : files_) {
    std::error_code ec;
    uint64_t n = fs::file_size(f, ec);
    ZAYA_CHECK(!ec, "cannot read the size of '", f, "': ", ec.message());
    total_bytes_ += n;
  }
}

bool CorpusReader::open_next_file() {
  if (file_open_) {
    in_.close();
    file_open_ = false;
    std::error_code ec;
    bytes_done_ += fs::file_size(files_[next_file_ - 1], ec);
    in_file_bytes_ = 0;
  }
  if (next_file_ >= files_.size()) return false;
  const std::string& path = files_[next_file_++];
  in_.clear();
  in_.open(path, std::ios::binary);
  ZAYA_CHECK(in_.is_open(), "cannot open input file '", path, "'");
  file_open_ = true;
  line_no_ = 0;
  return true;
}

bool CorpusReader::next(std::string& doc) {
  for (;;) {
    bool got = false;
    if (file_open_) {
      if (options_.format == CorpusFormat::kJsonl)
        got = next_jsonl(doc);
      else if (options_.text_doc_split == TextDocSplit::kParagraph)
        got = next_paragraph(doc);
      else
        got = next_text_file(doc);
    }
    if (got) return true;
    if (!open_next_file()) return false;
  }
}

// The whole file is one document (its bytes as they are).
bool CorpusReader::next_text_file(std::string& doc) {
  if (in_file_bytes_ > 0 || in_.eof()) return false;
  std::ostringstream s;
  s << in_.rdbuf();
  ZAYA_CHECK(!in_.bad(), "cannot read input file '", files_[next_file_ - 1], "'");
  doc = s.str();
  in_file_bytes_ = doc.size() + 1;  // +1 marks the file as consumed, even when empty
  in_.setstate(std::ios::eofbit);
  return !doc.empty();
}

// A paragraph is a run of lines that are not blank (blank = only spaces, tabs, \r); its lines (without
// a CRLF's \r) are joined with "\n", without the final newline.
bool CorpusReader::next_paragraph(std::string& doc) {
  doc.clear();
  bool any = false;
  while (std::getline(in_, line_)) {
    line_no_++;
    in_file_bytes_ += line_.size() + 1;
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();  // CRLF files
    bool blank = line_.find_first_not_of(" \t\r") == std::string::npos;
    if (blank) {
      if (any) return true;
      continue;
    }
    if (any) doc.push_back('\n');
    doc += line_;
    any = true;
  }
  ZAYA_CHECK(!in_.bad(), "cannot read input file '", files_[next_file_ - 1], "'");
  return any;
}

bool CorpusReader::next_jsonl(std::string& doc) {
  const std::string& path = files_[next_file_ - 1];
  while (std::getline(in_, line_)) {
    line_no_++;
    in_file_bytes_ += line_.size() + 1;
    if (line_.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are allowed
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line_);
    } catch (const nlohmann::json::exception& e) {
      // parse_error, and out_of_range for a number beyond double (1e400): both are a bad line, not a crash.
      fail(str_cat(path, ":", line_no_, ": not valid JSON (", e.what(), ")"));
    }
    ZAYA_CHECK(j.is_object(), path, ":", line_no_, ": expected a JSON object with a string field '",
               options_.jsonl_field, "', got ", j.type_name());
    auto it = j.find(options_.jsonl_field);
    ZAYA_CHECK(it != j.end(), path, ":", line_no_, ": no field '", options_.jsonl_field,
               "' (set the field with --jsonl-field)");
    ZAYA_CHECK(it->is_string(), path, ":", line_no_, ": field '", options_.jsonl_field,
               "' is not a string (got ", it->type_name(), ")");
    doc = it->get<std::string>();
    if (!doc.empty()) return true;
  }
  ZAYA_CHECK(!in_.bad(), "cannot read input file '", path, "'");
  return false;
}

}  // namespace zaya::data
