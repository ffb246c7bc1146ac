// Fuzz target for the safetensors reader and the checkpoint index parser: any byte string must either
// parse (and then every tensor's bytes are readable) or fail with zaya::Error; never crash, hang or
// read out of bounds. The seeds are small valid files the driver mutates.
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint_files.h"
#include "io/safetensors.h"

namespace {

// A whole safetensors file: little-endian header length, the header padded to 8 bytes, the data.
std::vector<uint8_t> make_file(std::string header, const std::vector<uint8_t>& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> bytes(8);
  for (int i = 0; i < 8; i++) bytes[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

std::vector<uint8_t> counting_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i++) v[i] = uint8_t(i * 7 + 1);
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    zaya::SafetensorsFile f = zaya::SafetensorsFile::parse(data, size, "fuzz-input");
    uint64_t checksum = 0;
    for (const std::string& name : f.names()) {
      zaya::Tensor t = f.tensor(name);
      const auto* bytes = static_cast<const uint8_t*>(t.data);
      for (size_t i = 0; i < t.nbytes(); i++) checksum += bytes[i];
      checksum += uint64_t(t.numel());
    }
    for (const auto& [key, value] : f.metadata()) checksum += key.size() + value.size();
    volatile uint64_t sink = checksum;  // keep the reads
    (void)sink;
  } catch (const zaya::Error&) {
  }
  try {
    zaya::CheckpointIndex index =
        zaya::parse_checkpoint_index(std::string(reinterpret_cast<const char*>(data), size), "fuzz-index");
    volatile size_t sink = index.weight_map.size();
    (void)sink;
  } catch (const zaya::Error&) {
  }
  return 0;
}

extern "C" size_t LLVMFuzzerSeedCount() {
  return 4;
}

extern "C" std::vector<uint8_t> LLVMFuzzerSeed(size_t i) {
  switch (i) {
    case 0:  // every dtype, back to back in the reference writer's order
      return make_file(
          R"({"__metadata__":{"format":"pt"},"i":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
          R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[16,40]},"u":{"dtype":"U32","shape":[1],"data_offsets":[40,44]},)"
          R"("n":{"dtype":"I32","shape":[1],"data_offsets":[44,48]},"b":{"dtype":"BF16","shape":[3],"data_offsets":[48,54]},)"
          R"("h":{"dtype":"F16","shape":[1],"data_offsets":[54,56]},"m":{"dtype":"U8","shape":[5],"data_offsets":[56,61]}})",
          counting_bytes(61));
    case 1:  // scalar, empty tensor, metadata only
      return make_file(
          R"({"__metadata__":{"a":"1","b":"two"},"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
          R"("e":{"dtype":"BF16","shape":[0,7],"data_offsets":[4,4]}})",
          counting_bytes(4));
    case 2:  // unpadded header: misaligned data (exercises the aligned-copy path)
    {
      std::string header =
          R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[1,9]},"y":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
      std::vector<uint8_t> bytes(8);
      for (int k = 0; k < 8; k++) bytes[k] = uint8_t(uint64_t(header.size()) >> (8 * k));
      bytes.insert(bytes.end(), header.begin(), header.end());
      std::vector<uint8_t> d = counting_bytes(9);
      bytes.insert(bytes.end(), d.begin(), d.end());
      return bytes;
    }
    default:  // a checkpoint index
    {
      std::string index =
          R"({"metadata":{"total_size":96},"weight_map":{"a.w":"model-00001-of-00002.safetensors","b.w":"model-00002-of-00002.safetensors"}})";
      return std::vector<uint8_t>(index.begin(), index.end());
    }
  }
}
