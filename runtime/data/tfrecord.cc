#include "runtime/data/tfrecord.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/crc32c.h"
#include "common/status_macros.h"

namespace weft {
namespace data {
namespace {

constexpr size_t kHeaderBytes = 12;  // length + masked length CRC
constexpr size_t kFooterBytes = 4;   // masked data CRC
constexpr size_t kLabelBytes = 4;

void PutLE32(uint32_t v, char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
void PutLE64(uint64_t v, char* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint32_t GetLE32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t GetLE64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

constexpr size_t kReadChunk = size_t{1} << 16;
constexpr size_t kWriteChunk = size_t{1} << 16;

// Checks a record's 12-byte header against the `left` bytes of the file
// that follow it: empty and `*length` set when the record fits, else what
// is wrong. Neither message quotes the stored CRC or length bytes' meaning
// beyond the length: those are the file's own bytes, and the reader may
// have been pointed at any file.
std::string CheckRecordHeader(const char* header, uint64_t left, uint64_t* length) {
  if (UnmaskCrc32c(GetLE32(header + 8)) != Crc32c(header, 8)) {
    return "the length field's CRC does not match (not a TFRecord file, or a damaged one)";
  }
  // The length is trusted only once it fits in the rest of the file and
  // under the cap; only then may a buffer be sized for it.
  *length = GetLE64(header);
  if (*length > left || left - *length < kFooterBytes) {
    return absl::StrCat("truncated record: the length field gives ", *length,
                        " bytes plus a 4-byte CRC, but only ", left, " bytes remain in the file");
  }
  if (*length > kMaxTFRecordBytes) {
    return absl::StrCat("the length field gives ", *length, " bytes, over the limit of ", kMaxTFRecordBytes,
                        " bytes for one record");
  }
  return "";
}

std::string TruncatedHeader(uint64_t left) {
  return absl::StrCat("truncated record: the file ends ", left, " bytes into the 12-byte record header");
}

absl::Status OpenError(const std::string& path, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(path, ": cannot open: ", s.message()));
}

}  // namespace

// ---- Writer ----------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TFRecordWriter>> TFRecordWriter::Open(const std::string& path, Env* env) {
  absl::StatusOr<std::unique_ptr<WritableFile>> file = env->NewWritableFile(path);
  if (!file.ok()) return OpenError(path, file.status());
  return std::unique_ptr<TFRecordWriter>(new TFRecordWriter(path, *std::move(file)));
}

TFRecordWriter::~TFRecordWriter() {
  if (file_ != nullptr && !pending_.empty()) (void)file_->Append(pending_);  // errors are lost, as documented
}

absl::Status TFRecordWriter::Write(absl::string_view record) {
  if (record.size() > kMaxTFRecordBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": a record of ", record.size(),
                                                   " bytes is over the limit of ",
                                                   kMaxTFRecordBytes, " that readers accept"));
  }
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(path_, ": write after Close"));
  char header[kHeaderBytes];
  PutLE64(record.size(), header);
  PutLE32(MaskCrc32c(Crc32c(header, 8)), header + 8);
  char footer[kFooterBytes];
  PutLE32(MaskCrc32c(Crc32c(record.data(), record.size())), footer);
  pending_.append(header, kHeaderBytes);
  pending_.append(record.data(), record.size());
  pending_.append(footer, kFooterBytes);
  if (pending_.size() < kWriteChunk) return absl::OkStatus();
  return Flush();
}

absl::Status TFRecordWriter::Flush() {
  absl::Status s = file_->Append(pending_);
  pending_.clear();
  if (!s.ok()) return absl::DataLossError(absl::StrCat(path_, ": write failed: ", s.message()));
  return absl::OkStatus();
}

absl::Status TFRecordWriter::Close() {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed twice"));
  absl::Status s = pending_.empty() ? absl::OkStatus() : Flush();
  const absl::Status closed = file_->Close();
  file_.reset();
  if (s.ok() && !closed.ok()) s = absl::DataLossError(absl::StrCat(path_, ": write failed: ", closed.message()));
  return s;
}

// ---- Reader ----------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TFRecordReader>> TFRecordReader::Open(const std::string& path, Env* env) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = env->NewRandomAccessFile(path);
  if (!file.ok()) return OpenError(path, file.status());
  return std::unique_ptr<TFRecordReader>(new TFRecordReader(path, *std::move(file)));
}

TFRecordReader::TFRecordReader(std::string path, std::unique_ptr<RandomAccessFile> file)
    : path_(std::move(path)), file_(std::move(file)), file_size_(file_->Size()) {}

TFRecordReader::~TFRecordReader() = default;

absl::Status TFRecordReader::Corrupt(absl::string_view what) {
  error_ = absl::DataLossError(
      absl::StrCat(path_, ": corrupt TFRecord at byte offset ", offset_, ": ", what));
  return error_;
}

absl::Status TFRecordReader::ReadBytes(size_t n, char* dst) {
  while (n > 0) {
    if (buf_pos_ == buf_.size()) {
      if (n >= kReadChunk) {  // a large record goes straight to its buffer
        RETURN_IF_ERROR(file_->Read(file_pos_, n, dst));
        file_pos_ += n;
        return absl::OkStatus();
      }
      const size_t k = static_cast<size_t>(std::min<uint64_t>(kReadChunk, file_size_ - file_pos_));
      buf_.resize(k);
      buf_pos_ = 0;
      if (k == 0) return absl::OutOfRangeError(absl::StrCat(path_, ": the file ends early"));
      absl::Status s = file_->Read(file_pos_, k, buf_.data());
      if (!s.ok()) {
        buf_.clear();
        return s;
      }
      file_pos_ += k;
    }
    const size_t k = std::min(n, buf_.size() - buf_pos_);
    std::memcpy(dst, buf_.data() + buf_pos_, k);
    buf_pos_ += k;
    dst += k;
    n -= k;
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> TFRecordReader::ReadRecord(std::string* record) {
  if (!error_.ok()) return error_;
  const uint64_t left = file_size_ - std::min(file_size_, offset_);
  if (left == 0) return false;  // clean end of file
  if (left < kHeaderBytes) return Corrupt(TruncatedHeader(left));
  char header[kHeaderBytes];
  if (absl::Status s = ReadBytes(kHeaderBytes, header); !s.ok()) {
    return Corrupt(absl::StrCat("read error: ", s.message()));
  }
  uint64_t length = 0;
  if (std::string bad = CheckRecordHeader(header, left - kHeaderBytes, &length); !bad.empty()) return Corrupt(bad);
  record->resize(static_cast<size_t>(length));
  char footer[kFooterBytes];
  absl::Status s = ReadBytes(static_cast<size_t>(length), record->data());
  if (s.ok()) s = ReadBytes(kFooterBytes, footer);
  if (absl::IsOutOfRange(s)) {
    return Corrupt(absl::StrCat("truncated record: the file ends inside a ", length,
                                "-byte record (did it shrink while being read?)"));
  }
  if (!s.ok()) return Corrupt(absl::StrCat("read error: ", s.message()));
  if (UnmaskCrc32c(GetLE32(footer)) != Crc32c(record->data(), length)) {
    return Corrupt(absl::StrCat("the data CRC of the ", length, "-byte record does not match"));
  }
  offset_ += kHeaderBytes + length + kFooterBytes;
  return true;
}

absl::StatusOr<int64_t> CountRecords(const std::string& path, Env* env) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> opened = env->NewRandomAccessFile(path);
  if (!opened.ok()) return OpenError(path, opened.status());
  const std::unique_ptr<RandomAccessFile> file = *std::move(opened);
  const uint64_t size = file->Size();
  int64_t count = 0;
  // offset <= size throughout: each step moves it by a record that was
  // checked to fit in what was left.
  for (uint64_t offset = 0; offset < size;) {
    auto corrupt = [&](absl::string_view what) {
      return absl::DataLossError(absl::StrCat(path, ": corrupt TFRecord at byte offset ", offset, ": ", what));
    };
    const uint64_t left = size - offset;
    if (left < kHeaderBytes) return corrupt(TruncatedHeader(left));
    char header[kHeaderBytes];
    if (absl::Status s = file->Read(offset, kHeaderBytes, header); !s.ok()) {
      return corrupt(absl::StrCat("read error: ", s.message()));
    }
    uint64_t length = 0;
    if (std::string bad = CheckRecordHeader(header, left - kHeaderBytes, &length); !bad.empty()) return corrupt(bad);
    offset += kHeaderBytes + length + kFooterBytes;
    ++count;
  }
  return count;
}

// ---- Image examples --------------------------------------------------------

void EncodeImageExample(uint32_t label, absl::Span<const uint8_t> pixels, std::string* out) {
  const size_t start = out->size();
  out->resize(start + kLabelBytes + pixels.size());
  PutLE32(label, &(*out)[start]);
  if (!pixels.empty()) std::memcpy(&(*out)[start + kLabelBytes], pixels.data(), pixels.size());
}

absl::Status DecodeImageExample(absl::string_view record, uint32_t* label,
                                absl::Span<uint8_t> pixels) {
  if (record.size() != kLabelBytes + pixels.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image example record holds ", record.size(), " bytes; an example of ", pixels.size(),
        " pixels needs ", kLabelBytes + pixels.size(), " (a 4-byte label, then the pixels)"));
  }
  *label = GetLE32(record.data());
  if (!pixels.empty()) std::memcpy(pixels.data(), record.data() + kLabelBytes, pixels.size());
  return absl::OkStatus();
}

absl::Status ReadImageExamples(const std::string& path, int64_t example_elems, std::vector<uint8_t>* pixels,
                               std::vector<int32_t>* labels, Env* env) {
  if (example_elems <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": example size must be positive, got ", example_elems));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TFRecordReader> reader, TFRecordReader::Open(path, env));
  std::string record;
  for (int64_t index = 0;; ++index) {
    const uint64_t offset = reader->offset();
    ASSIGN_OR_RETURN(bool more, reader->ReadRecord(&record));
    if (!more) break;
    // Size check before growing: a record of the wrong size must not make
    // the output grow by example_elems first.
    if (record.size() != kLabelBytes + static_cast<uint64_t>(example_elems)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": record ", index, " at byte offset ", offset, ": image example record holds ",
          record.size(), " bytes; an example of ", example_elems, " pixels needs ",
          kLabelBytes + static_cast<uint64_t>(example_elems),
          " (a 4-byte label, then the pixels)"));
    }
    const size_t start = pixels->size();
    pixels->resize(start + static_cast<size_t>(example_elems));
    uint32_t label = 0;
    absl::Status s = DecodeImageExample(
        record, &label, absl::MakeSpan(pixels->data() + start, static_cast<size_t>(example_elems)));
    if (!s.ok()) {
      pixels->resize(start);
      return Annotate(s, absl::StrCat(path, ": record ", index, " at byte offset ", offset));
    }
    if (label > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
      pixels->resize(start);
      return absl::InvalidArgumentError(absl::StrCat(path, ": record ", index, " at byte offset ",
                                                     offset, ": label ", label, " is too large"));
    }
    labels->push_back(static_cast<int32_t>(label));
  }
  return absl::OkStatus();
}

absl::Status WriteImageExamples(const std::string& path, absl::Span<const uint8_t> pixels,
                                absl::Span<const int32_t> labels, Env* env) {
  if (labels.empty() ? !pixels.empty() : pixels.size() % labels.size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", pixels.size(), " pixels do not split into ", labels.size(), " equal examples"));
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": label ", labels[i], " of example ", i, " is negative"));
    }
  }
  const size_t elems = labels.empty() ? 0 : pixels.size() / labels.size();
  ASSIGN_OR_RETURN(std::unique_ptr<TFRecordWriter> writer, TFRecordWriter::Open(path, env));
  std::string record;
  for (size_t i = 0; i < labels.size(); ++i) {
    record.clear();
    EncodeImageExample(static_cast<uint32_t>(labels[i]), pixels.subspan(i * elems, elems), &record);
    RETURN_IF_ERROR(writer->Write(record));
  }
  return writer->Close();
}

}  // namespace data
}  // namespace weft
