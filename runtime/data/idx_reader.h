// Reading MNIST-format IDX files into memory.
//
// An IDX file is a big-endian header followed by raw elements:
//   bytes 0-1  zero
//   byte  2    element type (0x08 = uint8; the only type weft reads)
//   byte  3    number of dimensions d
//   then d uint32 dimension sizes, then prod(dims) elements, nothing after.
// So images are magic 0x00000803 with dims [N, rows, cols] and labels are
// 0x00000801 with dims [N]. Files may be gzip-compressed (recognised by the
// 1f 8b magic, not by the name) or plain.
//
// Every defect of a file -- missing, not IDX, an unsupported element type,
// fewer or more bytes than the header promises, a corrupt gzip stream --
// comes back as a Status whose message names the file and the defect; no
// input makes these functions crash or allocate wildly more than the file
// can hold.
//
// Files are read through an Env (common/env.h), Env::Default() unless given,
// so that tests can make a read fail part-way; such a failure is an error
// naming the file and the offset, never a short read.
//
// Thread-safety: the functions are thread-safe (they share no state).
#ifndef WEFT_RUNTIME_DATA_IDX_READER_H_
#define WEFT_RUNTIME_DATA_IDX_READER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/env.h"

namespace weft {
namespace data {

// The contents of one IDX file: `count` examples, each of `example_shape`
// (empty for scalars such as labels), stored row-major in `data`.
struct IdxArray {
  int64_t count = 0;
  std::vector<int64_t> example_shape;
  std::vector<uint8_t> data;  // count * example_elems() bytes

  // Elements per example: the product of example_shape (1 for scalars).
  int64_t example_elems() const;
};

// Reads a uint8 IDX file of rank `expected_rank` (dims including the leading
// count; -1 accepts any rank >= 1).
//   NOT_FOUND:        the file does not exist.
//   DATA_LOSS:        corrupt gzip, or fewer bytes than the header describes.
//   INVALID_ARGUMENT: not an IDX file, unsupported type, wrong rank, or bytes
//                     after the data the header describes.
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int expected_rank = -1, Env* env = Env::Default());

// The count and example shape of an IDX file, from its header alone (a
// gzipped file is inflated only as far as the header): the checks of
// ReadIdxFile that the header allows, and the same errors. The data is not
// read, so a file truncated after its header is not noticed here.
struct IdxHeader {
  int64_t count = 0;
  std::vector<int64_t> example_shape;
};
absl::StatusOr<IdxHeader> ReadIdxHeader(const std::string& path, int expected_rank = -1,
                                        Env* env = Env::Default());

// An images file (rank >= 2: N, rows, cols[, ...]) and the labels file
// (rank 1: N) for the same examples.
struct IdxExamples {
  IdxArray images;
  IdxArray labels;
};

// Reads both files and checks that they hold the same number of examples and,
// when `num_classes` > 0, that every label is below it.
absl::StatusOr<IdxExamples> ReadIdxExamples(const std::string& images_path, const std::string& labels_path,
                                            int64_t num_classes = 0, Env* env = Env::Default());

}  // namespace data
}  // namespace weft

#endif  // WEFT_RUNTIME_DATA_IDX_READER_H_
