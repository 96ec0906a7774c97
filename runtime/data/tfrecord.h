// TFRecord files, and weft's record layout for image-classification examples.
//
// A TFRecord file is a sequence of records, each
//   uint64  length           little-endian
//   uint32  MaskCrc32c(CRC-32C of the 8 length bytes)
//   byte    data[length]
//   uint32  MaskCrc32c(CRC-32C of data)
// (see common/crc32c.h), the format TensorFlow's TFRecordWriter writes with no
// compression. The reader reports a corrupt length CRC, a corrupt data CRC and
// a truncated record as DATA_LOSS errors naming the file and the byte offset
// of the bad record.
//
// Image example records. weft does not use tf.train.Example: each record is
// one example, encoded as
//   uint32  label            little-endian
//   uint8   pixels[E]        row-major, E = product of the example shape
// so a record is exactly 4 + E bytes. The example shape (e.g. [28, 28]) is not
// stored; whoever reads the files must know it (LoadDataset takes it as an
// argument). EncodeImageExample / DecodeImageExample are the one definition
// of this layout.
//
// Files are read and written through an Env (common/env.h), Env::Default()
// unless given, so that tests can make I/O fail part-way; a failed read is
// a DATA_LOSS error naming the file and the offset, never a short read.
//
// Thread-safety: TFRecordReader and TFRecordWriter are not thread-safe; use
// one object per thread. The free functions are thread-safe.
#ifndef WEFT_RUNTIME_DATA_TFRECORD_H_
#define WEFT_RUNTIME_DATA_TFRECORD_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/env.h"

namespace weft {
namespace data {

// Records longer than this are rejected as corrupt before any buffer is
// sized for them: weft's records are one example each (kilobytes), and a
// damaged length field must not commit gigabytes.
inline constexpr uint64_t kMaxTFRecordBytes = uint64_t{256} << 20;

class TFRecordWriter {
 public:
  // Creates or truncates `path`.
  static absl::StatusOr<std::unique_ptr<TFRecordWriter>> Open(const std::string& path, Env* env = Env::Default());
  // Writes what is buffered and closes the file if Close() was not called;
  // errors are then lost.
  ~TFRecordWriter();
  TFRecordWriter(const TFRecordWriter&) = delete;
  TFRecordWriter& operator=(const TFRecordWriter&) = delete;

  // Buffers records and writes them in chunks of 64 KiB.
  absl::Status Write(absl::string_view record);
  // Writes what is buffered and closes; reports a failed write (e.g. a full
  // disk). A Write after Close is FAILED_PRECONDITION.
  absl::Status Close();

 private:
  TFRecordWriter(std::string path, std::unique_ptr<WritableFile> file)
      : path_(std::move(path)), file_(std::move(file)) {}
  absl::Status Flush();

  const std::string path_;
  std::unique_ptr<WritableFile> file_;  // null once closed
  std::string pending_;                 // records not yet appended
};

class TFRecordReader {
 public:
  // NOT_FOUND naming `path` when it does not exist.
  static absl::StatusOr<std::unique_ptr<TFRecordReader>> Open(const std::string& path, Env* env = Env::Default());
  ~TFRecordReader();
  TFRecordReader(const TFRecordReader&) = delete;
  TFRecordReader& operator=(const TFRecordReader&) = delete;

  // Reads the next record into `*record`. Returns true when it did, false at
  // a clean end of file, and DATA_LOSS for a corrupt or truncated record or
  // one over kMaxTFRecordBytes (checked before `*record` is resized); after
  // an error every later call returns the same error. Errors name the file
  // and the byte offset, never the file's bytes.
  absl::StatusOr<bool> ReadRecord(std::string* record);

  // Byte offset of the next record.
  uint64_t offset() const { return offset_; }
  const std::string& path() const { return path_; }

 private:
  TFRecordReader(std::string path, std::unique_ptr<RandomAccessFile> file);
  absl::Status Corrupt(absl::string_view what);
  // The next `n` bytes after what was read so far, through a 64 KiB buffer
  // so that a small record costs no call of its own. OUT_OF_RANGE when the
  // file turns out shorter than it was at Open.
  absl::Status ReadBytes(size_t n, char* dst);

  const std::string path_;
  const std::unique_ptr<RandomAccessFile> file_;
  const uint64_t file_size_;  // as of Open
  uint64_t offset_ = 0;       // of the next record
  std::string buf_;           // bytes read ahead, from file_pos_ - buf_.size()
  size_t buf_pos_ = 0;        // the next of them to hand out
  uint64_t file_pos_ = 0;     // bytes taken from the file so far
  absl::Status error_;        // sticky
};

// The number of records in `path`, from their length fields alone: each
// header is read and checked as ReadRecord does (length CRC, the record and
// its CRC within the file, kMaxTFRecordBytes), the payloads are not read,
// so their CRCs are not checked. DATA_LOSS naming the file and the offset
// for a damaged header or a truncated file.
absl::StatusOr<int64_t> CountRecords(const std::string& path, Env* env = Env::Default());

// Appends the record of one example (layout above) to `*out`.
void EncodeImageExample(uint32_t label, absl::Span<const uint8_t> pixels, std::string* out);

// Splits `record` into its label and pixels. INVALID_ARGUMENT when the record
// is not exactly 4 + pixels.size() bytes.
absl::Status DecodeImageExample(absl::string_view record, uint32_t* label,
                                absl::Span<uint8_t> pixels);

// Reads every record of `path` as an example of `example_elems` pixels,
// appending to `*pixels` and `*labels`. Errors name the file, the record
// index and its byte offset. Labels above INT32_MAX are rejected.
absl::Status ReadImageExamples(const std::string& path, int64_t example_elems, std::vector<uint8_t>* pixels,
                               std::vector<int32_t>* labels, Env* env = Env::Default());

// Writes `labels.size()` examples, row i taking pixels [i*E, (i+1)*E) with
// E = pixels.size() / labels.size(). For tests and conversion tools.
absl::Status WriteImageExamples(const std::string& path, absl::Span<const uint8_t> pixels,
                                absl::Span<const int32_t> labels, Env* env = Env::Default());

}  // namespace data
}  // namespace weft

#endif  // WEFT_RUNTIME_DATA_TFRECORD_H_
