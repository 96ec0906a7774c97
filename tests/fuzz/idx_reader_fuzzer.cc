// Fuzzes the IDX reader, plain and gzipped (it detects gzip by the magic),
// through a scratch file. An array that reads must be as big as its header
// says.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "runtime/data/idx_reader.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static weft::fuzz::ScratchFile file("input-idx3-ubyte");
  file.Write(data, size);
  auto got = weft::data::ReadIdxFile(file.path());
  if (!got.ok()) return 0;
  const int64_t elems = got->example_elems();
  if (elems < 0 || got->count < 0) std::abort();
  if (static_cast<uint64_t>(got->count) * static_cast<uint64_t>(elems) != got->data.size()) std::abort();
  return 0;
}
