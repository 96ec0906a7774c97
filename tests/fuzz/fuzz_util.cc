#include "tests/fuzz/fuzz_util.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace weft {
namespace fuzz {
namespace {

std::string TempRoot() {
  for (const char* var : {"TEST_TMPDIR", "TMPDIR"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && v[0] != '\0') return v;
  }
  return "/tmp";
}

}  // namespace

ScratchFile::ScratchFile(const std::string& name) {
  std::string templ = TempRoot() + "/weft-fuzz-scratch.XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    std::perror("fuzz: mkdtemp");
    std::abort();
  }
  dir_ = templ;
  path_ = dir_ + "/" + name;
}

ScratchFile::~ScratchFile() {
  ::unlink(path_.c_str());
  ::rmdir(dir_.c_str());
}

void ScratchFile::Write(const uint8_t* data, size_t size) {
  std::FILE* f = std::fopen(path_.c_str(), "wb");
  if (f == nullptr || (size > 0 && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path_.c_str());
    std::abort();
  }
}

std::vector<absl::string_view> SplitPieces(const uint8_t* data, size_t size) {
  std::vector<absl::string_view> pieces;
  if (size == 0) return pieces;
  const uint8_t seed = data[0];
  const char* p = reinterpret_cast<const char*>(data) + 1;
  size_t left = size - 1;
  if (seed == 0) {
    pieces.emplace_back(p, left);
    return pieces;
  }
  for (unsigned i = 0; left > 0; ++i) {
    // A piece size from 1 to 16 that varies with the seed and the position.
    const size_t n = std::min<size_t>(left, 1 + ((seed >> (i % 8)) ^ i) % 16);
    pieces.emplace_back(p, n);
    p += n;
    left -= n;
  }
  return pieces;
}

}  // namespace fuzz
}  // namespace weft
