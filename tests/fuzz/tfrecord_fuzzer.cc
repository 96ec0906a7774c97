// Fuzzes the TFRecord reader through a scratch file: every record until the
// end or the first error, then the same file as image examples of 4 pixels
// (the layout LoadDataset reads).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/data/tfrecord.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static weft::fuzz::ScratchFile file("input.tfrecord");
  file.Write(data, size);
  auto reader = weft::data::TFRecordReader::Open(file.path());
  if (!reader.ok()) return 0;
  std::string record;
  uint64_t bytes = 0;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->ReadRecord(&record);
    if (!more.ok() || !*more) break;
    bytes += record.size();
  }
  if (bytes > size) std::abort();  // records hold no more than the file
  std::vector<uint8_t> pixels;
  std::vector<int32_t> labels;
  if (weft::data::ReadImageExamples(file.path(), 4, &pixels, &labels).ok() &&
      pixels.size() != 4 * labels.size()) {
    std::abort();
  }
  return 0;
}
