// Helpers shared by the fuzz targets in this directory.
//
// Readers that take a path get the input through ScratchFile: one file per
// process, rewritten for every input, so a run does no more file-system
// work than the reader itself. Decoders of gRPC byte buffers get the input
// split into slices by SplitPieces, so that the code which stitches a
// header across slice boundaries is fuzzed too.
//
// Thread-safety: not thread-safe; libFuzzer and replay_main.cc call a
// target from one thread.
#ifndef WEFT_TESTS_FUZZ_FUZZ_UTIL_H_
#define WEFT_TESTS_FUZZ_FUZZ_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace weft {
namespace fuzz {

// A file under $TEST_TMPDIR (or $TMPDIR, or /tmp) named after `name` and the
// process id, in a directory of its own, removed when the process exits
// normally. A crash leaves it behind; libFuzzer has saved the input anyway.
class ScratchFile {
 public:
  // `name` is the file's base name inside the scratch directory ("MANIFEST"
  // for readers that take a directory).
  explicit ScratchFile(const std::string& name);
  ~ScratchFile();
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // Replaces the file's contents with [data, data + size). Aborts when the
  // file cannot be written: that is the harness failing, not the target.
  void Write(const uint8_t* data, size_t size);

  const std::string& dir() const { return dir_; }
  const std::string& path() const { return path_; }

 private:
  std::string dir_;
  std::string path_;
};

// Splits `data` into pieces whose sizes are taken from the first byte (the
// "split seed"): the rest of the input in pieces of 1..16 bytes in a pattern
// the seed picks, or as one piece when the seed is 0. Views into `data`.
std::vector<absl::string_view> SplitPieces(const uint8_t* data, size_t size);

}  // namespace fuzz
}  // namespace weft

#endif  // WEFT_TESTS_FUZZ_FUZZ_UTIL_H_
