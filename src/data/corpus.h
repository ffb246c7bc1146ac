// Reading a text corpus as a stream of documents: plain text files (one document per file, or one per
// blank-line-separated paragraph) or JSONL (one JSON object per line, the document is a string field).
// Inputs are files or directories; a directory contributes every regular file under it (recursively,
// hidden names skipped) in sorted path order, so the document order never depends on the file system.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace zaya::data {

enum class CorpusFormat { kText, kJsonl };
enum class TextDocSplit { kFile, kParagraph };

struct CorpusOptions {
  std::vector<std::string> inputs;  // files or directories
  CorpusFormat format = CorpusFormat::kText;
  std::string jsonl_field = "text";
  TextDocSplit text_doc_split = TextDocSplit::kFile;
};

// "text" / "jsonl" and "file" / "paragraph"; throw zaya::Error naming the option for anything else.
CorpusFormat parse_corpus_format(const std::string& s);
TextDocSplit parse_text_doc_split(const std::string& s);

// The input files in document order; throws zaya::Error for a missing input or one that is neither a
// regular file nor a directory.
std::vector<std::string> list_input_files(const std::vector<std::string>& inputs);

// Streams documents in order. Empty documents (an empty file, an empty JSONL string) are skipped: they
// carry no tokens. Errors (unreadable file, invalid JSON, missing or non-string field) throw zaya::Error
// naming the file and line.
class CorpusReader {
 public:
  explicit CorpusReader(const CorpusOptions& options);

  // Fills doc with the next document; false at the end of the corpus.
  bool next(std::string& doc);

  uint64_t total_bytes() const { return total_bytes_; }  // sum of the input file sizes
  uint64_t bytes_read() const { return bytes_done_ + in_file_bytes_; }
  const std::vector<std::string>& files() const { return files_; }

 private:
  bool open_next_file();
  bool next_text_file(std::string& doc);
  bool next_paragraph(std::string& doc);
  bool next_jsonl(std::string& doc);

  CorpusOptions options_;
  std::vector<std::string> files_;
  uint64_t total_bytes_ = 0, bytes_done_ = 0, in_file_bytes_ = 0;
  size_t next_file_ = 0;
  std::ifstream in_;
  bool file_open_ = false;
  uint64_t line_no_ = 0;
  std::string line_;
};

}  // namespace zaya::data
