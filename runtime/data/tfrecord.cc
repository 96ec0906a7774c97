#include "runtime/data/tfrecord.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
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

absl::Status OpenError(const std::string& path, int err) {
  const std::string msg = absl::StrCat(path, ": cannot open: ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES) return absl::PermissionDeniedError(msg);
  return absl::UnavailableError(msg);
}

}  // namespace

// ---- Writer ----------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TFRecordWriter>> TFRecordWriter::Open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return OpenError(path, errno);
  return std::unique_ptr<TFRecordWriter>(new TFRecordWriter(path, f));
}

TFRecordWriter::~TFRecordWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status TFRecordWriter::Write(absl::string_view record) {
  if (record.size() > kMaxTFRecordBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": a record of ", record.size(),
                                                   " bytes is over the limit of ",
                                                   kMaxTFRecordBytes, " that readers accept"));
  }
  char header[kHeaderBytes];
  PutLE64(record.size(), header);
  PutLE32(MaskCrc32c(Crc32c(header, 8)), header + 8);
  char footer[kFooterBytes];
  PutLE32(MaskCrc32c(Crc32c(record.data(), record.size())), footer);
  if (std::fwrite(header, 1, kHeaderBytes, file_) != kHeaderBytes ||
      std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fwrite(footer, 1, kFooterBytes, file_) != kFooterBytes) {
    return absl::DataLossError(absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status TFRecordWriter::Close() {
  std::FILE* f = file_;
  file_ = nullptr;
  const bool flush_failed = std::fflush(f) != 0 || std::ferror(f);
  const int flush_errno = errno;
  if (std::fclose(f) != 0 || flush_failed) {
    return absl::DataLossError(
        absl::StrCat(path_, ": write failed: ", std::strerror(flush_failed ? flush_errno : errno)));
  }
  return absl::OkStatus();
}

// ---- Reader ----------------------------------------------------------------

absl::StatusOr<std::unique_ptr<TFRecordReader>> TFRecordReader::Open(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return OpenError(path, errno);
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    std::fclose(f);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  return std::unique_ptr<TFRecordReader>(
      new TFRecordReader(path, f, static_cast<uint64_t>(st.st_size)));
}

TFRecordReader::~TFRecordReader() { std::fclose(file_); }

absl::Status TFRecordReader::Corrupt(absl::string_view what) {
  error_ = absl::DataLossError(
      absl::StrCat(path_, ": corrupt TFRecord at byte offset ", offset_, ": ", what));
  return error_;
}

absl::StatusOr<bool> TFRecordReader::ReadRecord(std::string* record) {
  if (!error_.ok()) return error_;
  char header[kHeaderBytes];
  const size_t got = std::fread(header, 1, kHeaderBytes, file_);
  if (got == 0 && !std::ferror(file_)) return false;  // clean end of file
  if (std::ferror(file_)) return Corrupt(absl::StrCat("read error: ", std::strerror(errno)));
  if (got < kHeaderBytes) {
    return Corrupt(absl::StrCat("truncated record: the file ends ", got,
                                " bytes into the 12-byte record header"));
  }
  // Neither CRC mismatch quotes the stored value: those are the file's own
  // bytes, and the reader may have been pointed at any file.
  if (UnmaskCrc32c(GetLE32(header + 8)) != Crc32c(header, 8)) {
    return Corrupt("the length field's CRC does not match (not a TFRecord file, or a damaged one)");
  }
  // The length is trusted only once it fits in the rest of the file and
  // under the cap; only then is the buffer sized for it.
  const uint64_t length = GetLE64(header);
  uint64_t header_end = 0;
  if (!CheckedAdd<uint64_t>(offset_, kHeaderBytes, &header_end)) header_end = file_size_;
  const uint64_t remaining = file_size_ - std::min(file_size_, header_end);
  if (length > remaining || remaining - length < kFooterBytes) {
    return Corrupt(absl::StrCat("truncated record: the length field gives ", length,
                                " bytes plus a 4-byte CRC, but only ", remaining,
                                " bytes remain in the file"));
  }
  if (length > kMaxTFRecordBytes) {
    return Corrupt(absl::StrCat("the length field gives ", length,
                                " bytes, over the limit of ", kMaxTFRecordBytes,
                                " bytes for one record"));
  }
  record->resize(static_cast<size_t>(length));
  char footer[kFooterBytes];
  if (std::fread(record->data(), 1, length, file_) != length ||
      std::fread(footer, 1, kFooterBytes, file_) != kFooterBytes) {
    return Corrupt(absl::StrCat("truncated record: the file ends inside a ", length,
                                "-byte record (did it shrink while being read?)"));
  }
  if (UnmaskCrc32c(GetLE32(footer)) != Crc32c(record->data(), length)) {
    return Corrupt(absl::StrCat("the data CRC of the ", length, "-byte record does not match"));
  }
  offset_ += kHeaderBytes + length + kFooterBytes;
  return true;
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

absl::Status ReadImageExamples(const std::string& path, int64_t example_elems,
                               std::vector<uint8_t>* pixels, std::vector<int32_t>* labels) {
  if (example_elems <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": example size must be positive, got ", example_elems));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TFRecordReader> reader, TFRecordReader::Open(path));
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
                                absl::Span<const int32_t> labels) {
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
  ASSIGN_OR_RETURN(std::unique_ptr<TFRecordWriter> writer, TFRecordWriter::Open(path));
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
