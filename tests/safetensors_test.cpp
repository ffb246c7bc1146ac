// safetensors I/O: round trips through the writers, byte-identity with the Hugging Face writer on the
// golden checkpoints, sharded checkpoints, and one malformed-file test per rejection the reader makes.
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint_files.h"
#include "io/mapped_file.h"
#include "io/safetensors_writer.h"
#include "io/strict_json.h"

namespace fs = std::filesystem;
using namespace zaya;

namespace {

const std::string kGoldenDir = std::string(ZAYA_SOURCE_DIR) + "/tests/data/golden/zaya1_like";

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// A safetensors file from a raw header string (not padded unless the test pads it) and data bytes.
std::vector<uint8_t> make_file(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> bytes(8);
  uint64_t n = header.size();
  for (int i = 0; i < 8; i++) bytes[i] = uint8_t(n >> (8 * i));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

// Runs `fn`, which must throw zaya::Error whose message contains every string in `parts`.
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected zaya::Error, got another exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected zaya::Error mentioning '" << (parts.empty() ? "" : parts[0]) << "'";
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "zaya_st_XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }

  // Writes a file with `header` and `data` and expects opening it to fail naming the file + `parts`.
  void expect_bad_file(const std::string& header, const std::vector<uint8_t>& data,
                       std::vector<std::string> parts) {
    std::string p = path("bad.safetensors");
    write_bytes(p, make_file(header, data));
    parts.push_back(p);
    expect_error([&] { SafetensorsFile::open(p); }, parts);
  }

  std::string dir_;
};

Tensor random_tensor(DType dtype, const Shape& shape, std::mt19937& rng) {
  Tensor t = Tensor::empty(dtype, shape);
  auto* bytes = static_cast<uint8_t*>(t.data);
  for (size_t i = 0; i < t.nbytes(); i++) bytes[i] = uint8_t(rng());
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.data, b.data, a.nbytes()) == 0);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Round trips and layout

TEST_F(SafetensorsTest, RoundTripAllDtypesEmptyAndScalar) {
  std::mt19937 rng(7);
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"f32", random_tensor(DType::F32, {3, 5}, rng)},    {"bf16", random_tensor(DType::BF16, {7}, rng)},
      {"f16", random_tensor(DType::F16, {2, 3, 1}, rng)}, {"i32", random_tensor(DType::I32, {5}, rng)},
      {"i64", random_tensor(DType::I64, {3}, rng)},       {"u8", random_tensor(DType::U8, {13}, rng)},
      {"u32", random_tensor(DType::U32, {2}, rng)},       {"empty", random_tensor(DType::F32, {0, 4}, rng)},
      {"scalar", random_tensor(DType::F32, {}, rng)},     {"odd.u8", random_tensor(DType::U8, {1}, rng)},
  };
  std::string p = path("all.safetensors");
  write_safetensors(p, tensors, {{"format", "pt"}, {"note", "ünïcödé \"quoted\""}});

  SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.size(), tensors.size());
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "ünïcödé \"quoted\"");
  EXPECT_EQ(f.data_offset() % 8, 0u) << "the writer pads the header to 8 bytes";
  for (const auto& [name, original] : tensors) {
    ASSERT_TRUE(f.has(name)) << name;
    Tensor t = f.tensor(name);
    EXPECT_TRUE(same_bytes(t, original)) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype), 0u) << name;
    // Aligned tensors are views into the mapping, not copies.
    EXPECT_EQ(static_cast<const void*>(t.data), static_cast<const void*>(f.tensor_bytes(name))) << name;
    EXPECT_EQ(f.info(name).nbytes(), original.nbytes()) << name;
  }
  EXPECT_EQ(f.tensor("scalar").shape, Shape{});
  EXPECT_EQ(f.tensor("scalar").numel(), 1);
  EXPECT_EQ(f.tensor("empty").numel(), 0);
  EXPECT_FALSE(f.has("missing"));
  expect_error([&] { f.info("missing"); }, {p, "missing"});

  // Data order is descending alignment, then name (the reference writer's order).
  // "empty" (F32, 0 bytes) shares its offset with a neighbour; names() sorts by (begin, end, name),
  // so compare the order of the tensors that have bytes.
  std::vector<std::string> with_bytes;
  for (const std::string& n : f.names())
    if (f.info(n).nbytes() > 0) with_bytes.push_back(n);
  EXPECT_EQ(with_bytes,
            (std::vector<std::string>{"i64", "f32", "scalar", "u32", "i32", "bf16", "f16", "odd.u8", "u8"}));
}

TEST_F(SafetensorsTest, ViewKeepsMappingAlive) {
  std::mt19937 rng(1);
  Tensor original = random_tensor(DType::F32, {64}, rng);
  std::string p = path("alive.safetensors");
  write_safetensors(p, {{"w", original}});
  Tensor view;
  {
    SafetensorsFile f = SafetensorsFile::open(p);
    view = f.tensor("w");
  }
  fs::remove(p);  // the mapping survives both the SafetensorsFile and the directory entry
  EXPECT_TRUE(same_bytes(view, original));
}

// Test vectors from the reference implementation's own serialization tests.
TEST_F(SafetensorsTest, HeaderBytesMatchReferenceWriter) {
  Tensor t = Tensor::empty(DType::F32, {1, 2, 3});
  for (int i = 0; i < 6; i++) t.f32()[i] = float(i);
  std::string p = path("ref.safetensors");
  write_safetensors(p, {{"attn.0", t}});
  std::vector<uint8_t> bytes = read_bytes(p);
  std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);
  std::vector<uint8_t> expected = make_file(header, {});
  for (int i = 0; i < 6; i++) {
    float v = float(i);
    uint8_t b[4];
    std::memcpy(b, &v, 4);
    expected.insert(expected.end(), b, b + 4);
  }
  EXPECT_EQ(bytes, expected);

  write_safetensors(p, {});
  EXPECT_EQ(read_bytes(p), make_file("{}      ", {}));
  write_safetensors(p, {}, {{"framework", "pt"}});
  EXPECT_EQ(read_bytes(p), make_file(std::string(R"({"__metadata__":{"framework":"pt"}})") + "     ", {}));
}

// Our writer reproduces the golden files (written by Python safetensors) byte for byte.
TEST_F(SafetensorsTest, GoldenFilesRewriteByteIdentical) {
  for (const char* name : {"model.safetensors", "model.bf16.safetensors", "grads.safetensors"}) {
    std::string golden = kGoldenDir + "/" + name;
    SafetensorsFile f = SafetensorsFile::open(golden);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const std::string& n : f.names()) tensors.push_back({n, f.tensor(n)});
    std::string p = path(name);
    write_safetensors(p, tensors, f.metadata());
    EXPECT_TRUE(read_bytes(p) == read_bytes(golden)) << name;
  }
}

TEST_F(SafetensorsTest, GoldenModelNamesShapesValues) {
  SafetensorsFile f32 = SafetensorsFile::open(kGoldenDir + "/model.safetensors");
  SafetensorsFile bf16 = SafetensorsFile::open(kGoldenDir + "/model.bf16.safetensors");
  EXPECT_EQ(f32.size(), 131u);
  EXPECT_EQ(f32.metadata().at("format"), "pt");
  EXPECT_FALSE(f32.has("lm_head.weight")) << "tied embeddings";
  EXPECT_EQ(f32.info("model.embed_tokens.weight").shape, (Shape{512, 128}));

  Tensor biases = f32.tensor("model.layers.0.mlp.gate.balancing_biases");
  ASSERT_EQ(biases.dtype, DType::F32);
  ASSERT_EQ(biases.shape, Shape{9});
  const float expected[9] = {0.0002791144361253828f,  -0.019038096070289612f, -0.04776143655180931f,
                             -0.0028167706914246082f, 0.03176623582839966f,   0.0017181042348966002f,
                             0.02208973467350006f,    0.01799016445875168f,   0.05999999865889549f};
  for (int i = 0; i < 9; i++) EXPECT_EQ(biases.f32()[i], expected[i]) << i;
  Tensor embed = f32.tensor("model.embed_tokens.weight");
  EXPECT_EQ(embed.f32()[0], -0.2285866141319275f);
  EXPECT_EQ(embed.f32()[2], -0.1986818164587021f);

  // The bf16 file holds the same tensors, rounded to nearest even.
  EXPECT_EQ(bf16.names().size(), f32.names().size());
  for (const std::string& n : f32.names()) {
    ASSERT_TRUE(bf16.has(n)) << n;
    Tensor a = f32.tensor(n), b = bf16.tensor(n);
    ASSERT_EQ(b.dtype, DType::BF16) << n;
    ASSERT_EQ(a.shape, b.shape) << n;
    for (int64_t i = 0; i < a.numel(); i++)
      ASSERT_EQ(f32_to_bf16(a.f32()[i]), b.bf16()[i]) << n << "[" << i << "]";
  }
}

TEST_F(SafetensorsTest, MisalignedDataIsCopiedAligned) {
  // A foreign writer that does not pad: the 4-byte floats start at an odd file offset.
  std::string header =
      R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[1,13]},"b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  if ((8 + header.size() + 1) % 4 == 0) header += " ";
  std::vector<uint8_t> data = {42};
  for (float v : {1.5f, -2.0f, 3.25f}) {
    uint8_t b[4];
    std::memcpy(b, &v, 4);
    data.insert(data.end(), b, b + 4);
  }
  std::string p = path("misaligned.safetensors");
  write_bytes(p, make_file(header, data));
  SafetensorsFile f = SafetensorsFile::open(p);
  ASSERT_NE(reinterpret_cast<uintptr_t>(f.tensor_bytes("x")) % 4, 0u);
  Tensor x = f.tensor("x");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data) % 64, 0u);
  EXPECT_EQ(x.f32()[0], 1.5f);
  EXPECT_EQ(x.f32()[1], -2.0f);
  EXPECT_EQ(x.f32()[2], 3.25f);
  EXPECT_EQ(static_cast<uint8_t*>(f.tensor("b").data)[0], 42);
}

TEST_F(SafetensorsTest, ParseFromMemoryAndGapsAllowed) {
  // A gap between tensors and trailing bytes are tolerated; zero-size tensors may sit anywhere.
  std::string header =
      R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"z":{"dtype":"F32","shape":[0],"data_offsets":[1,1]},)"
      R"("b":{"dtype":"U8","shape":[1],"data_offsets":[4,5]}}   )";
  std::vector<uint8_t> bytes = make_file(header, {1, 2, 9, 9, 3, 9});
  SafetensorsFile f = SafetensorsFile::parse(bytes.data(), bytes.size(), "memory");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "z", "b"}));
  EXPECT_EQ(static_cast<uint8_t*>(f.tensor("b").data)[0], 3);
  EXPECT_EQ(f.path(), "memory");
}

// ---------------------------------------------------------------------------------------------------
// Malformed files: each rejection names the file and what is wrong.

TEST_F(SafetensorsTest, RejectsTooShortFile) {
  std::string p = path("short.safetensors");
  write_bytes(p, {1, 2, 3});
  expect_error([&] { SafetensorsFile::open(p); }, {p, "too short"});
  write_bytes(p, {});
  expect_error([&] { SafetensorsFile::open(p); }, {p, "too short"});
}

TEST_F(SafetensorsTest, RejectsAbsurdHeaderLength) {
  std::string p = path("huge.safetensors");
  std::vector<uint8_t> bytes(64, ' ');
  uint64_t n = 200'000'000;
  for (int i = 0; i < 8; i++) bytes[i] = uint8_t(n >> (8 * i));
  write_bytes(p, bytes);
  expect_error([&] { SafetensorsFile::open(p); }, {p, "absurd"});
  for (int i = 0; i < 8; i++) bytes[i] = 0xff;
  write_bytes(p, bytes);
  expect_error([&] { SafetensorsFile::open(p); }, {p, "absurd"});
}

TEST_F(SafetensorsTest, RejectsHeaderLengthBeyondFile) {
  std::string p = path("trunc.safetensors");
  std::vector<uint8_t> bytes = make_file("{}", {});
  bytes[0] = 100;
  write_bytes(p, bytes);
  expect_error([&] { SafetensorsFile::open(p); }, {p, "header length 100 is larger than the file"});
}

TEST_F(SafetensorsTest, RejectsInvalidJson) {
  expect_bad_file(R"({"a":{"dtype":"F32",)", {}, {"not valid JSON"});
  expect_bad_file("", {}, {"not valid JSON"});
  expect_bad_file("{\"a\xff\":1}", {}, {"not valid JSON"});                   // invalid UTF-8
  expect_bad_file(std::string("{}\0\0\0\0\0\0", 8), {}, {"not valid JSON"});  // NUL padding
  // An empty input as a null pointer (an empty vector's data(); found by optim_config_fuzz under UBSan:
  // the NUL scan passed it to memchr).
  EXPECT_THROW(zaya::parse_json_strict(nullptr, 0, "empty"), zaya::Error);
}

TEST_F(SafetensorsTest, RejectsHeaderNotObject) {
  expect_bad_file("[1,2]", {}, {"header is an array, expected a JSON object"});
  expect_bad_file("\"text\"", {}, {"expected a JSON object"});
}

TEST_F(SafetensorsTest, RejectsDuplicateKeys) {
  expect_bad_file(
      R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
      {1, 2}, {"repeats the key 'a'"});
  expect_bad_file(R"({"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}})", {1},
                  {"repeats the key 'dtype'"});
}

TEST_F(SafetensorsTest, RejectsDeeplyNestedJsonWithoutCrashing) {
  std::string header = "{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  expect_bad_file(header, {}, {"tensor 'a'", "expected an object"});
}

TEST_F(SafetensorsTest, RejectsEntryNotObject) {
  expect_bad_file(R"({"w":[0,4]})", {0, 0, 0, 0}, {"tensor 'w'", "entry is an array, expected an object"});
}

TEST_F(SafetensorsTest, RejectsMissingFields) {
  expect_bad_file(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", {0, 0, 0, 0},
                  {"tensor 'w'", "missing field 'dtype'"});
  expect_bad_file(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", {0, 0, 0, 0},
                  {"tensor 'w'", "missing field 'shape'"});
  expect_bad_file(R"({"w":{"dtype":"F32","shape":[1]}})", {0, 0, 0, 0},
                  {"tensor 'w'", "missing field 'data_offsets'"});
}

TEST_F(SafetensorsTest, RejectsExtraField) {
  expect_bad_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"offsets":[0,4]}})", {0, 0, 0, 0},
                  {"tensor 'w'", "unexpected field 'offsets'"});
}

TEST_F(SafetensorsTest, RejectsUnknownDtype) {
  expect_bad_file(R"({"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", std::vector<uint8_t>(8),
                  {"tensor 'w'", "unsupported dtype 'F64'"});
  expect_bad_file(R"({"w":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})", {0},
                  {"unsupported dtype 'BOOL'"});
  expect_bad_file(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", {0, 0, 0, 0},
                  {"field 'dtype' is the integer 4, expected a string"});
}

TEST_F(SafetensorsTest, RejectsBadShapeDims) {
  expect_bad_file(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", {},
                  {"tensor 'w'", "shape[0] is the integer -1"});
  expect_bad_file(R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,0]}})", {},
                  {"shape[0] is the non-integer number 1.5"});
  expect_bad_file(R"({"w":{"dtype":"U8","shape":[1.0],"data_offsets":[0,1]}})", {0}, {"non-integer number"});
  expect_bad_file(R"({"w":{"dtype":"U8","shape":[2,"3"],"data_offsets":[0,6]}})", std::vector<uint8_t>(6),
                  {"shape[1] is a string"});
  expect_bad_file(R"({"w":{"dtype":"U8","shape":4,"data_offsets":[0,4]}})", {0, 0, 0, 0},
                  {"field 'shape' is the integer 4"});
  expect_bad_file(R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]}})", {},
                  {"below 2^63"});
  expect_bad_file(R"({"w":{"dtype":"U8","shape":[1e300],"data_offsets":[0,0]}})", {}, {"non-integer"});
}

TEST_F(SafetensorsTest, RejectsOverflowingShape) {
  // 2^32 * 2^32 elements: the element count overflows int64.
  expect_bad_file(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", {},
                  {"tensor 'w'", "overflows"});
  // A zero dim does not hide an overflowing product (consumers multiply dims in order).
  expect_bad_file(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})", {},
                  {"overflows"});
  // 2^62 F32 elements fit in int64, but their byte size (2^64) does not fit in uint64.
  expect_bad_file(R"({"w":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})", {},
                  {"overflows the byte size"});
}

TEST_F(SafetensorsTest, RejectsBadDataOffsets) {
  std::vector<uint8_t> four(4);
  expect_bad_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", four,
                  {"tensor 'w'", "expected [begin, end]"});
  expect_bad_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", four,
                  {"expected [begin, end]"});
  expect_bad_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":{"a":0}}})", four,
                  {"expected [begin, end]"});
  expect_bad_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", four,
                  {"not two non-negative integers"});
  expect_bad_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})", four,
                  {"not two non-negative integers"});
  expect_bad_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":["0","4"]}})", four,
                  {"not two non-negative integers"});
  expect_bad_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", four,
                  {"tensor 'w'", "not ascending"});
}

TEST_F(SafetensorsTest, RejectsEndBeyondData) {
  expect_bad_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", {0, 0, 0, 0},
                  {"tensor 'w'", "end 8 is beyond the data region (4 bytes)"});
  expect_bad_file(
      R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,18446744073709551615]}})",
      {0, 0, 0, 0}, {"beyond the data region"});
}

TEST_F(SafetensorsTest, RejectsSizeMismatch) {
  expect_bad_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", std::vector<uint8_t>(8),
                  {"tensor 'w'", "hold 4 bytes but shape [2] of F32 needs 8"});
  expect_bad_file(R"({"w":{"dtype":"BF16","shape":[],"data_offsets":[0,4]}})", std::vector<uint8_t>(8),
                  {"shape [] of BF16 needs 2"});
}

TEST_F(SafetensorsTest, RejectsOverlappingTensors) {
  expect_bad_file(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      std::vector<uint8_t>(8), {"tensor 'b'", "overlap tensor 'a'"});
  expect_bad_file(
      R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
      std::vector<uint8_t>(4), {"overlap"});
}

TEST_F(SafetensorsTest, RejectsBadMetadata) {
  expect_bad_file(R"({"__metadata__":{"format":"pt","step":3}})", {},
                  {"'__metadata__' key 'step' is the integer 3, expected a string"});
  expect_bad_file(R"({"__metadata__":["pt"]})", {}, {"'__metadata__' is an array"});
  expect_bad_file(R"({"__metadata__":null})", {}, {"'__metadata__' is null"});
}

// ---------------------------------------------------------------------------------------------------
// Mapped files

TEST_F(SafetensorsTest, MappedFileErrorsNamePathAndErrno) {
  std::string missing = path("nope.safetensors");
  expect_error([&] { MappedFile::open(missing); }, {missing, "No such file"});
  expect_error([&] { MappedFile::open(dir_); }, {dir_, "not a regular file"});
  std::string empty = path("empty");
  write_bytes(empty, {});
  auto m = MappedFile::open(empty);
  EXPECT_EQ(m->size(), 0u);
  EXPECT_EQ(m->data(), nullptr);
}

// ---------------------------------------------------------------------------------------------------
// Sharded checkpoints

namespace {

// Deterministic content: byte i of tensor k is (k * 31 + i) & 255.
void fill_pattern(const std::vector<TensorSpec>& specs, const TensorSpec& s, void* dst) {
  size_t k = 0;
  while (specs[k].name != s.name) k++;
  auto* b = static_cast<uint8_t*>(dst);
  for (uint64_t i = 0; i < s.nbytes(); i++) b[i] = uint8_t(k * 31 + i);
}

bool has_pattern(const std::vector<TensorSpec>& specs, size_t k, const Tensor& t) {
  if (t.dtype != specs[k].dtype || t.shape != specs[k].shape) return false;
  auto* b = static_cast<const uint8_t*>(t.data);
  for (uint64_t i = 0; i < t.nbytes(); i++)
    if (b[i] != uint8_t(k * 31 + i)) return false;
  return true;
}

std::vector<TensorSpec> test_specs() {
  return {{"model.embed_tokens.weight", DType::BF16, {64, 16}},  // 2048 bytes
          {"model.layers.0.w", DType::F32, {16, 16}},            // 1024
          {"model.layers.0.b", DType::F32, {16}},                // 64
          {"model.layers.0.ids", DType::I64, {3}},               // 24
          {"model.layers.1.w", DType::BF16, {16, 16}},           // 512
          {"model.layers.1.mask", DType::U8, {5}},               // 5
          {"model.layers.1.empty", DType::F32, {0}},             // 0
          {"model.norm.weight", DType::F32, {}}};                // 4
}

}  // namespace

TEST(SafetensorsShards, PlanIsGreedyInOrder) {
  std::vector<TensorSpec> specs = test_specs();
  auto plan = plan_safetensors_shards(specs, 1100);
  // 2048 alone (too big); 1024+64 = 1088; 24+512+5+0+4 = 545.
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0], (std::vector<size_t>{0}));
  EXPECT_EQ(plan[1], (std::vector<size_t>{1, 2}));
  EXPECT_EQ(plan[2], (std::vector<size_t>{3, 4, 5, 6, 7}));
  EXPECT_EQ(plan_safetensors_shards(specs, 1 << 20).size(), 1u);
  EXPECT_EQ(shard_file_name(0, 4), "model-00001-of-00004.safetensors");
  expect_error([&] { plan_safetensors_shards(specs, 0); }, {"max_shard_bytes"});
}

TEST_F(SafetensorsTest, ShardedRoundTripWithIndex) {
  std::vector<TensorSpec> specs = test_specs();
  std::string ckpt = path("ckpt");
  std::set<std::string> filled;
  auto fill = [&](const TensorSpec& s, void* dst) {
    EXPECT_TRUE(filled.insert(s.name).second) << s.name << " filled twice";
    EXPECT_EQ(reinterpret_cast<uintptr_t>(dst) % dtype_size(s.dtype), 0u) << s.name;
    fill_pattern(specs, s, dst);
  };
  std::vector<std::string> written = write_safetensors_sharded(ckpt, specs, fill, 1100, {{"format", "pt"}});
  EXPECT_EQ(filled.size(), specs.size());
  EXPECT_EQ(written,
            (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                      "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  EXPECT_FALSE(fs::exists(ckpt + "/model.safetensors"));
  for (const auto& e : fs::directory_iterator(ckpt))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "temporary file left behind";

  std::ifstream in(ckpt + "/model.safetensors.index.json");
  nlohmann::json index = nlohmann::json::parse(in);
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), 2048u + 1024 + 64 + 24 + 512 + 5 + 0 + 4);
  EXPECT_EQ(index["weight_map"]["model.layers.0.b"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"].size(), specs.size());

  for (const std::string& source : {ckpt, ckpt + "/model.safetensors.index.json"}) {
    CheckpointFiles c = CheckpointFiles::open(source);
    EXPECT_EQ(c.files().size(), 3u);
    EXPECT_EQ(c.size(), specs.size());
    EXPECT_EQ(c.metadata().at("format"), "pt");
    for (size_t k = 0; k < specs.size(); k++) {
      ASSERT_TRUE(c.has(specs[k].name));
      EXPECT_TRUE(has_pattern(specs, k, c.tensor(specs[k].name))) << specs[k].name;
      EXPECT_EQ(c.info(specs[k].name).shape, specs[k].shape);
    }
    std::vector<std::string> names = c.names();
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
    expect_error([&] { c.tensor("nope"); }, {"checkpoint", "nope"});
  }

  // Saving again into the same directory as one file removes the stale index and shards.
  written = write_safetensors_sharded(
      ckpt, specs, [&](const TensorSpec& s, void* dst) { fill_pattern(specs, s, dst); }, 1 << 20);
  EXPECT_EQ(written, (std::vector<std::string>{"model.safetensors"}));
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(ckpt)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
  CheckpointFiles single = CheckpointFiles::open(ckpt);
  EXPECT_EQ(single.files().size(), 1u);
  for (size_t k = 0; k < specs.size(); k++) EXPECT_TRUE(has_pattern(specs, k, single.tensor(specs[k].name)));
  CheckpointFiles by_file = CheckpointFiles::open(ckpt + "/model.safetensors");
  EXPECT_EQ(by_file.size(), specs.size());
}

TEST_F(SafetensorsTest, FailingFillLeavesDirectoryUnchanged) {
  std::vector<TensorSpec> specs = test_specs();
  std::string ckpt = path("failing");
  auto good_fill = [&](const TensorSpec& s, void* dst) { fill_pattern(specs, s, dst); };
  write_safetensors_sharded(ckpt, specs, good_fill, 1100);
  std::set<std::string> before;
  for (const auto& e : fs::directory_iterator(ckpt)) before.insert(e.path().filename().string());

  // A new save (other shard count) whose fill fails in the last shard: the old checkpoint survives.
  std::vector<TensorSpec> bigger = specs;
  bigger.push_back({"model.extra", DType::F32, {300}});
  auto failing_fill = [&](const TensorSpec& s, void* dst) {
    if (s.name == "model.extra") throw Error("fill failed on purpose");
    std::memset(dst, 0xee, s.nbytes());
  };
  expect_error([&] { write_safetensors_sharded(ckpt, bigger, failing_fill, 1100); }, {"on purpose"});
  std::set<std::string> after;
  for (const auto& e : fs::directory_iterator(ckpt)) after.insert(e.path().filename().string());
  EXPECT_EQ(before, after);
  CheckpointFiles c = CheckpointFiles::open(ckpt);
  EXPECT_FALSE(c.has("model.extra"));
  for (size_t k = 0; k < specs.size(); k++) EXPECT_TRUE(has_pattern(specs, k, c.tensor(specs[k].name)));
}

// Writing over the file the tensors are mapped from is safe: the old mapping stays valid.
TEST_F(SafetensorsTest, RewriteInPlaceFromOwnMapping) {
  std::mt19937 rng(3);
  std::string p = path("inplace.safetensors");
  Tensor a = random_tensor(DType::F32, {100}, rng), b = random_tensor(DType::BF16, {7}, rng);
  write_safetensors(p, {{"a", a}, {"b", b}});
  {
    SafetensorsFile f = SafetensorsFile::open(p);
    write_safetensors(p, {{"a", f.tensor("a")}, {"b", f.tensor("b")}, {"c", f.tensor("a")}});
  }
  SafetensorsFile g = SafetensorsFile::open(p);
  EXPECT_TRUE(same_bytes(g.tensor("a"), a));
  EXPECT_TRUE(same_bytes(g.tensor("b"), b));
  EXPECT_TRUE(same_bytes(g.tensor("c"), a));
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  std::string p = path("w.safetensors");
  Tensor t = Tensor::empty(DType::F32, {2});
  expect_error([&] { write_safetensors(p, {{"a", t}, {"a", t}}); }, {p, "'a' is listed twice"});
  expect_error([&] { write_safetensors(p, {{"__metadata__", t}}); }, {p, "reserved"});
  expect_error([&] { write_safetensors(p, {{"bad\xff", t}}); }, {p, "not valid UTF-8"});
  expect_error([&] { write_safetensors(p, {{"a", t}}, {{"k", "\xfe"}}); }, {p, "not valid UTF-8"});
  Tensor no_data = Tensor::view(DType::F32, {2}, nullptr, nullptr);
  expect_error([&] { write_safetensors(p, {{"a", no_data}}); }, {p, "no data"});
  std::string nodir = path("no/such/dir/w.safetensors");
  expect_error([&] { write_safetensors(nodir, {{"a", t}}); }, {nodir, "cannot create"});
  std::vector<TensorSpec> neg = {{"n", DType::F32, {2, -1}}};
  expect_error(
      [&] {
        write_safetensors_sharded(
            path("neg"), neg, [](const TensorSpec&, void*) {}, 100);
      },
      {"'n'", "negative dim"});
  EXPECT_FALSE(fs::exists(p));
}

// ---------------------------------------------------------------------------------------------------
// Sharded index errors

class ShardedIndexErrors : public SafetensorsTest {
 protected:
  // Two shards: a.safetensors holds x, y; b.safetensors holds z.
  void SetUp() override {
    SafetensorsTest::SetUp();
    Tensor t = Tensor::empty(DType::F32, {2});
    write_safetensors(path("a.safetensors"), {{"x", t}, {"y", t}});
    write_safetensors(path("b.safetensors"), {{"z", t}});
  }
  std::string index(const std::string& text) {
    std::string p = path("model.safetensors.index.json");
    write_text(p, text);
    return p;
  }
};

TEST_F(ShardedIndexErrors, ValidIndexOpens) {
  index(
      R"({"metadata":{"total_size":24},"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"}})");
  CheckpointFiles c = CheckpointFiles::open(dir_);
  EXPECT_EQ(c.names(), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(c.file_of("z").path(), path("b.safetensors"));
}

TEST_F(ShardedIndexErrors, MissingShard) {
  std::string p = index(R"({"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"c.safetensors"}})");
  expect_error([&] { CheckpointFiles::open(dir_); }, {p, "shard 'c.safetensors'", "does not exist"});
}

TEST_F(ShardedIndexErrors, NameNotInShard) {
  std::string p = index(R"({"weight_map":{"x":"a.safetensors","y":"b.safetensors","z":"b.safetensors"}})");
  expect_error([&] { CheckpointFiles::open(dir_); },
               {p, "tensor 'y'", "shard 'b.safetensors'", "does not contain it"});
}

TEST_F(ShardedIndexErrors, DuplicateTensorAcrossShards) {
  Tensor t = Tensor::empty(DType::F32, {2});
  write_safetensors(path("b.safetensors"), {{"z", t}, {"x", t}});
  std::string p = index(R"({"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"}})");
  expect_error([&] { CheckpointFiles::open(dir_); },
               {p, "tensor 'x'", "appears in shard 'b.safetensors'", "'a.safetensors'"});
}

TEST_F(ShardedIndexErrors, TensorMissingFromWeightMap) {
  std::string p = index(R"({"weight_map":{"x":"a.safetensors","z":"b.safetensors"}})");
  expect_error([&] { CheckpointFiles::open(dir_); }, {p, "holds tensor 'y'", "does not list"});
}

TEST_F(ShardedIndexErrors, MalformedIndex) {
  std::string p = index("{not json");
  expect_error([&] { CheckpointFiles::open(dir_); }, {p, "not valid JSON"});
  index("[]");
  expect_error([&] { CheckpointFiles::open(dir_); }, {p, "expected a JSON object"});
  index(R"({"metadata":{}})");
  expect_error([&] { CheckpointFiles::open(dir_); }, {p, "missing field 'weight_map'"});
  index(R"({"weight_map":[]})");
  expect_error([&] { CheckpointFiles::open(dir_); }, {p, "field 'weight_map' is an array"});
  index(R"({"weight_map":{}})");
  expect_error([&] { CheckpointFiles::open(dir_); }, {p, "weight_map is empty"});
  index(R"({"weight_map":{"x":3}})");
  expect_error([&] { CheckpointFiles::open(dir_); }, {p, "entry 'x' is the integer 3"});
  index(R"({"weight_map":{"x":"../a.safetensors"}})");
  expect_error([&] { CheckpointFiles::open(dir_); }, {p, "leaves the checkpoint directory"});
  index(R"({"weight_map":{"x":"/etc/passwd"}})");
  expect_error([&] { CheckpointFiles::open(dir_); }, {p, "absolute path"});
  index(R"({"metadata":[],"weight_map":{"x":"a.safetensors"}})");
  expect_error([&] { CheckpointFiles::open(dir_); }, {p, "field 'metadata' is an array"});
  index(R"({"metadata":{"total_size":-1},"weight_map":{"x":"a.safetensors"}})");
  expect_error([&] { CheckpointFiles::open(dir_); }, {p, "total_size"});
  index(R"({"weight_map":{"x":"a.safetensors","x":"b.safetensors"}})");
  expect_error([&] { CheckpointFiles::open(dir_); }, {p, "repeats the key 'x'"});
}

TEST_F(ShardedIndexErrors, BadShardContentNamesShard) {
  write_bytes(path("b.safetensors"), {1, 2, 3});
  index(R"({"weight_map":{"x":"a.safetensors","y":"a.safetensors","z":"b.safetensors"}})");
  expect_error([&] { CheckpointFiles::open(dir_); }, {path("b.safetensors"), "too short"});
}

TEST_F(SafetensorsTest, CheckpointDirectoryWithoutModelFiles) {
  expect_error([&] { CheckpointFiles::open(dir_); },
               {dir_, "neither model.safetensors nor model.safetensors.index.json"});
  expect_error([&] { CheckpointFiles::open(path("missing")); }, {path("missing"), "does not exist"});
}

namespace zaya {
// The bulk fp32 -> bf16 conversions (16 lanes where the build targets AVX-512, 8 on AVX2) give f32_to_bf16's
// bits for every kind of value: ties to even both ways, subnormals, the largest finite values rounding to
// infinity, infinities, NaNs of both signs (quieted) and random words; over a length that leaves a scalar
// tail.
TEST(DType, BulkBf16ConversionEqualsScalar) {
  std::vector<uint32_t> words = {0x00000000u, 0x80000000u, 0x00000001u, 0x00008000u, 0x00018000u,
                                 0x007fffffu, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x7f7fffffu,
                                 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00000u,
                                 0x7fbfffffu, 0x3f800000u, 0xbf7fc000u};
  std::mt19937 rng(7);
  while (words.size() < 16 * 64 + 5) words.push_back(rng());
  std::vector<float> src(words.size());
  std::memcpy(src.data(), words.data(), words.size() * sizeof(float));
  std::vector<uint16_t> bulk(src.size());
  convert_f32_to_bf16(bulk.data(), src.data(), int64_t(src.size()));
  for (size_t i = 0; i < src.size(); i++)
    ASSERT_EQ(bulk[i], f32_to_bf16(src[i])) << "word 0x" << std::hex << words[i];
  // The same rounding kept in fp32 (out of place and in place), and the bulk widening back.
  std::vector<float> rounded(src.size()), in_place = src, widened(src.size());
  round_f32_to_bf16_values(rounded.data(), src.data(), int64_t(src.size()));
  round_f32_to_bf16_values(in_place.data(), in_place.data(), int64_t(in_place.size()));
  convert_bf16_to_f32(widened.data(), bulk.data(), int64_t(bulk.size()));
  for (size_t i = 0; i < src.size(); i++) {
    const uint32_t expect = uint32_t(f32_to_bf16(src[i])) << 16;
    uint32_t got[3];
    std::memcpy(&got[0], &rounded[i], 4);
    std::memcpy(&got[1], &in_place[i], 4);
    std::memcpy(&got[2], &widened[i], 4);
    for (uint32_t g : got) ASSERT_EQ(g, expect) << "word 0x" << std::hex << words[i];
  }
}
}  // namespace zaya
