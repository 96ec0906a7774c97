#include "runtime/data/idx_reader.h"

#include <sys/mman.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checked_math.h"
#include "common/env.h"
#include "common/status_macros.h"

namespace weft {
namespace data {
namespace {

constexpr size_t kInputChunk = size_t{1} << 16;
// No real dataset comes near this; a header that claims more is garbage.
constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 40;
// A header's size is allocated up front only when a gzip file of n bytes
// could plausibly inflate to it: at most this many times n. Real datasets
// inflate 2-5x (Fashion-MNIST's images 1.8x); deflate's own limit, 1032x,
// would let a damaged header in a 30 MB file commit 30 GB before the data
// runs out. Beyond this ratio the buffer grows as bytes arrive instead.
constexpr uint64_t kMaxInflateRatio = 64;

// The bytes of a file read through an Env, inflated on the fly when it is
// gzip-compressed: the compressed bytes are read a chunk at a time and only
// the data asked for is inflated, so memory stays bounded by what the
// caller asks for. Errors name the file; the caller adds nothing but context.
class ByteSource {
 public:
  ~ByteSource() {
    if (gzip_) inflateEnd(&zs_);
  }

  static absl::StatusOr<std::unique_ptr<ByteSource>> Open(const std::string& path, Env* env) {
    absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = env->NewRandomAccessFile(path);
    if (!file.ok()) {
      return absl::Status(file.status().code(), absl::StrCat(path, ": cannot open: ", file.status().message()));
    }
    std::unique_ptr<ByteSource> src(new ByteSource(path, *std::move(file)));
    RETURN_IF_ERROR(src->Fill());
    const bool gz = src->in_.size() >= 2 && src->in_[0] == 0x1f && src->in_[1] == 0x8b;
    if (gz) {
      // 16 + MAX_WBITS: expect a gzip wrapper and check its CRC-32 and length.
      if (inflateInit2(&src->zs_, 16 + MAX_WBITS) != Z_OK) {
        return absl::ResourceExhaustedError(absl::StrCat(path, ": cannot initialise zlib"));
      }
      src->gzip_ = true;
    }
    return src;
  }

  bool gzip() const { return gzip_; }

  // The most bytes Read can plausibly still return: what is left of the
  // file, times kMaxInflateRatio when it is compressed. Lets a reader size
  // its buffer once for data the file can hold.
  uint64_t MaxRemaining() const {
    const uint64_t left = (file_size_ > file_pos_ ? file_size_ - file_pos_ : 0) +
                          (gzip_ ? zs_.avail_in : in_.size() - in_pos_);
    return gzip_ ? left * kMaxInflateRatio : left;
  }

  // Reads up to `n` bytes into `dst`; fewer only at the end of the data.
  absl::StatusOr<size_t> Read(uint8_t* dst, size_t n) {
    return gzip_ ? ReadGzip(dst, n) : ReadPlain(dst, n);
  }

 private:
  ByteSource(std::string path, std::unique_ptr<RandomAccessFile> file)
      : path_(std::move(path)), file_(std::move(file)), file_size_(file_->Size()) {
    std::memset(&zs_, 0, sizeof(zs_));
  }

  // Replaces the input buffer with the next chunk of the file (empty at its
  // end, as of Open). A read that fails, or finds the file shorter than it
  // was, is an error naming the file and the offset, never a short read.
  absl::Status Fill() {
    const size_t got = static_cast<size_t>(std::min<uint64_t>(kInputChunk, file_size_ - file_pos_));
    in_.resize(got);
    if (got > 0) {
      const absl::Status read = file_->Read(file_pos_, got, reinterpret_cast<char*>(in_.data()));
      if (!read.ok()) {
        in_.clear();
        return absl::Status(read.code(),
                            absl::StrCat(path_, ": read error at byte ", file_pos_, ": ", read.message()));
      }
    }
    in_pos_ = 0;
    file_pos_ += got;
    zs_.next_in = in_.data();
    zs_.avail_in = static_cast<uInt>(got);
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> ReadPlain(uint8_t* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      if (in_pos_ == in_.size()) {
        RETURN_IF_ERROR(Fill());
        if (in_.empty()) break;
      }
      const size_t k = std::min(n - got, in_.size() - in_pos_);
      std::memcpy(dst + got, in_.data() + in_pos_, k);
      in_pos_ += k;
      got += k;
    }
    return got;
  }

  absl::StatusOr<size_t> ReadGzip(uint8_t* dst, size_t n) {
    size_t got = 0;
    while (got < n) {
      if (zs_.avail_in == 0) {
        RETURN_IF_ERROR(Fill());
        if (zs_.avail_in == 0) {
          if (stream_end_) break;  // clean end after a complete gzip member
          return absl::DataLossError(
              absl::StrCat(path_, ": corrupt gzip: the compressed stream ends early at byte ",
                           file_pos_, " (truncated .gz file)"));
        }
      }
      if (stream_end_) {
        // More input after a complete member: gzip allows concatenated
        // members; anything else fails the header check below.
        inflateReset(&zs_);
        stream_end_ = false;
      }
      const size_t want = std::min<size_t>(n - got, 1u << 30);
      zs_.next_out = dst + got;
      zs_.avail_out = static_cast<uInt>(want);
      const int rc = inflate(&zs_, Z_NO_FLUSH);
      got += want - zs_.avail_out;
      if (rc == Z_STREAM_END) {
        stream_end_ = true;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        return absl::DataLossError(absl::StrCat(path_, ": corrupt gzip data near byte ",
                                                file_pos_ - zs_.avail_in, ": ",
                                                zs_.msg != nullptr ? zs_.msg : zError(rc)));
      }
    }
    return got;
  }

  const std::string path_;
  const std::unique_ptr<RandomAccessFile> file_;
  const uint64_t file_size_;  // as of Open
  std::vector<uint8_t> in_;
  size_t in_pos_ = 0;      // plain files: next unread byte of in_
  uint64_t file_pos_ = 0;  // bytes taken from the file so far
  bool gzip_ = false;
  z_stream zs_;
  bool stream_end_ = false;
};

// Asks the kernel to back the whole pages of [p, p + n) with huge pages:
// a dataset is tens of MB written once, and taking it 4 KiB page fault by
// page fault costs more than inflating it. Advice only; failure is harmless.
void AdviseHugePages(void* p, size_t n) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) & ~(kHuge - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

std::string DimsString(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

// The IDX element types by their type byte. The error for an unsupported one
// names the type, never the byte itself: a reader pointed at an arbitrary
// file must not echo that file's contents.
const char* IdxTypeName(uint8_t type) {
  switch (type) {
    case 0x09: return "signed byte (0x09)";
    case 0x0b: return "int16 (0x0b)";
    case 0x0c: return "int32 (0x0c)";
    case 0x0d: return "float32 (0x0d)";
    case 0x0e: return "float64 (0x0e)";
    default: return "an unknown type code";
  }
}

// The header of the IDX file `src` reads, checked: `kind` names the file's
// form in errors. Leaves `src` at the first data byte.
struct ParsedHeader {
  std::vector<int64_t> dims;
  size_t header_bytes = 0;
  uint64_t total = 0;  // data bytes the dims describe, under kMaxPayloadBytes
};

absl::StatusOr<ParsedHeader> ReadHeader(ByteSource* src, const std::string& path, const char* kind,
                                        int expected_rank) {
  uint8_t magic[4];
  ASSIGN_OR_RETURN(size_t got, src->Read(magic, 4));
  if (got < 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not an IDX file: only ", got, " bytes, too short for the 4-byte magic number"));
  }
  if (magic[0] != 0 || magic[1] != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": not an IDX file: the magic number does not start with two zero bytes (an IDX "
        "file starts 00 00, then the type byte and the rank)"));
  }
  if (magic[2] != 0x08) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": unsupported IDX element type ",
                                                   IdxTypeName(magic[2]),
                                                   "; only unsigned bytes (0x08) are supported"));
  }
  const int rank = magic[3];
  if (rank == 0 || (expected_rank >= 0 && rank != expected_rank)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": IDX file has rank ", rank, ", expected rank ",
                     expected_rank >= 0 ? expected_rank : 1, expected_rank >= 0 ? "" : " or more"));
  }

  std::vector<uint8_t> raw_dims(4 * static_cast<size_t>(rank));
  ASSIGN_OR_RETURN(got, src->Read(raw_dims.data(), raw_dims.size()));
  if (got < raw_dims.size()) {
    return absl::DataLossError(absl::StrCat(path, ": truncated ", kind, ": header needs ",
                                            4 + raw_dims.size(), " bytes, file has ", 4 + got));
  }
  std::vector<int64_t> dims(rank);
  for (int i = 0; i < rank; ++i) {
    const uint8_t* p = &raw_dims[4 * i];
    dims[i] = (int64_t{p[0]} << 24) | (int64_t{p[1]} << 16) | (int64_t{p[2]} << 8) | p[3];
  }
  // The product is checked factor by factor: a header such as [2^20, 2^20,
  // 2^24] multiplies to exactly 2^64, which wraps to 0 in unchecked
  // arithmetic and would pass every later size check. Zero dimensions are
  // left out of the bound, so that [0, 2^32-1, 2^32-1, 2^32-1] (no data, but
  // an example shape whose size overflows) is refused too: every partial
  // product of the dims, and so example_elems(), stays under the cap.
  uint64_t nonzero = 1;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] == 0) continue;
    if (!CheckedMul(nonzero, static_cast<uint64_t>(dims[i]), &nonzero) || nonzero > kMaxPayloadBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": implausible IDX header: dimension ", i, " (", dims[i], ") of ",
          DimsString(dims), " makes the data more than 2^40 bytes"));
    }
  }
  const bool empty = std::find(dims.begin(), dims.end(), 0) != dims.end();
  ParsedHeader h;
  h.total = empty ? 0 : nonzero;
  h.header_bytes = 4 + raw_dims.size();
  h.dims = std::move(dims);
  return h;
}


}  // namespace

int64_t IdxArray::example_elems() const {
  // ReadIdxFile bounds the product; a hand-built array that overflows gets
  // -1, which every caller rejects, instead of a wrapped count.
  int64_t n = 1;
  for (int64_t d : example_shape) {
    if (d < 0 || !CheckedMul(n, d, &n)) return -1;
  }
  return n;
}

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path, int expected_rank, Env* env) {
  ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> src, ByteSource::Open(path, env));
  const char* kind = src->gzip() ? "gzipped IDX file" : "IDX file";
  ASSIGN_OR_RETURN(ParsedHeader header, ReadHeader(src.get(), path, kind, expected_rank));
  const std::vector<int64_t>& dims = header.dims;
  const uint64_t total = header.total;
  size_t got = 0;

  IdxArray out;
  out.count = dims[0];
  out.example_shape.assign(dims.begin() + 1, dims.end());
  // One buffer of the size the header gives when the file can hold that
  // much (every real file), so the data is written once and never moved.
  // Otherwise grow it as bytes arrive, so a lying header cannot make us
  // allocate much more than the file really holds.
  if (src->MaxRemaining() >= total) {
    out.data.reserve(total);
    AdviseHugePages(out.data.data(), total);
    out.data.resize(total);
  }
  size_t have = 0;
  while (have < total) {
    if (have == out.data.size()) {
      const size_t next = std::max<size_t>(out.data.size() * 2, size_t{1} << 20);
      out.data.resize(std::min<uint64_t>(total, next));
    }
    ASSIGN_OR_RETURN(got, src->Read(out.data.data() + have, out.data.size() - have));
    if (got == 0) break;
    have += got;
  }
  if (have < total) {
    return absl::DataLossError(absl::StrCat(path, ": truncated ", kind, ": header dimensions ",
                                            DimsString(dims), " need ", total,
                                            " bytes of data after the ", header.header_bytes,
                                            "-byte header, but the file holds only ", have));
  }

  // Anything after the data means the header and the file disagree. Reading
  // to the end also makes zlib verify the gzip trailer's CRC.
  uint64_t extra = 0;
  uint8_t scratch[4096];
  do {
    ASSIGN_OR_RETURN(got, src->Read(scratch, sizeof(scratch)));
    extra += got;
  } while (got > 0);
  if (extra > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": trailing garbage: ", extra, " bytes after the ", total,
                     " bytes of data that header dimensions ", DimsString(dims), " describe"));
  }
  return out;
}

absl::StatusOr<IdxHeader> ReadIdxHeader(const std::string& path, int expected_rank, Env* env) {
  ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> src, ByteSource::Open(path, env));
  const char* kind = src->gzip() ? "gzipped IDX file" : "IDX file";
  ASSIGN_OR_RETURN(ParsedHeader header, ReadHeader(src.get(), path, kind, expected_rank));
  IdxHeader out;
  out.count = header.dims[0];
  out.example_shape.assign(header.dims.begin() + 1, header.dims.end());
  return out;
}

absl::StatusOr<IdxExamples> ReadIdxExamples(const std::string& images_path, const std::string& labels_path,
                                            int64_t num_classes, Env* env) {
  IdxExamples ex;
  ASSIGN_OR_RETURN(ex.images, ReadIdxFile(images_path, /*expected_rank=*/-1, env));
  if (ex.images.example_shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        images_path, ": expected an images file (rank >= 2), found a rank-1 IDX file"));
  }
  ASSIGN_OR_RETURN(ex.labels, ReadIdxFile(labels_path, /*expected_rank=*/1, env));
  if (ex.images.count != ex.labels.count) {
    return absl::InvalidArgumentError(absl::StrCat(images_path, " holds ", ex.images.count,
                                                   " images but ", labels_path, " holds ",
                                                   ex.labels.count, " labels"));
  }
  if (num_classes > 0) {
    for (size_t i = 0; i < ex.labels.data.size(); ++i) {
      if (ex.labels.data[i] >= num_classes) {
        return absl::InvalidArgumentError(
            absl::StrCat(labels_path, ": label ", static_cast<int>(ex.labels.data[i]),
                         " of example ", i, " is out of range for num_classes=", num_classes));
      }
    }
  }
  return ex;
}

}  // namespace data
}  // namespace weft
