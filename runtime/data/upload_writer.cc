#include "runtime/data/upload_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checked_math.h"
#include "common/status_macros.h"
#include "runtime/data/idx_reader.h"

namespace weft {
namespace data {
namespace {

constexpr char kTmpPrefix[] = ".tmp-";

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno(absl::StrCat("write ", path));
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Removes a flat directory: its files, then itself.
void RemoveFlatDir(const std::string& dir) {
  if (DIR* d = ::opendir(dir.c_str()); d != nullptr) {
    while (struct dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") ::unlink(absl::StrCat(dir, "/", name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

bool IsGzip(const std::string& path) {
  unsigned char magic[2] = {0, 0};
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, magic, 2);
  ::close(fd);
  return n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

// An uncompressed IDX file's length from its header: 4 + 4 * rank +
// count * elements; -1 on overflow.
int64_t IdxFileBytes(const IdxHeader& h) {
  int64_t elems = h.count;
  for (int64_t d : h.example_shape) {
    if (!CheckedMul(elems, d, &elems)) return -1;
  }
  int64_t total = 0;
  const int64_t header = 4 + 4 * (1 + static_cast<int64_t>(h.example_shape.size()));
  return CheckedAdd(elems, header, &total) ? total : -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<UploadWriter>> UploadWriter::Create(const ConfinedRoot& root) {
  absl::BitGen gen;
  const std::string tmp = absl::StrFormat("%s%016x", kTmpPrefix, absl::Uniform<uint64_t>(gen));
  const std::string path = absl::StrCat(root.path(), "/", tmp);
  if (::mkdir(path.c_str(), 0700) != 0) return Errno(absl::StrCat("mkdir ", path));
  return std::unique_ptr<UploadWriter>(new UploadWriter(root, tmp));
}

UploadWriter::~UploadWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) RemoveAll();
}

void UploadWriter::RemoveAll() { RemoveFlatDir(absl::StrCat(root_.path(), "/", tmp_)); }

absl::Status UploadWriter::StartFile(absl::string_view name, int64_t size) {
  const int i = UploadFileIndex(name);
  if (i < 0) {
    return absl::InvalidArgumentError(absl::StrCat("unknown file \"", absl::CEscape(name.substr(0, 64)),
                                                   "\": an upload holds train_images, train_labels, test_images "
                                                   "and test_labels"));
  }
  if (present_[i]) return absl::InvalidArgumentError(absl::StrCat("file ", name, " sent twice"));
  if (size < 0) return absl::InvalidArgumentError(absl::StrCat("file ", name, ": negative size ", size));
  RETURN_IF_ERROR(CloseCurrent());
  int64_t declared = 0;
  if (!CheckedAdd(declared_, size, &declared)) {
    return absl::InvalidArgumentError(absl::StrCat("file ", name, ": the sizes declared overflow"));
  }
  const std::string rel = absl::StrCat(tmp_, "/", name);
  ASSIGN_OR_RETURN(fd_, root_.OpenFile(rel, O_WRONLY | O_CREAT | O_EXCL, 0600));
  made_.push_back(std::string(name));
  present_[i] = true;
  sizes_[i] = size;
  current_ = i;
  current_left_ = size;
  declared_ = declared;
  return absl::OkStatus();
}

absl::Status UploadWriter::Append(absl::string_view data) {
  if (data.empty()) return absl::OkStatus();
  if (current_ < 0 || fd_ < 0) return absl::InvalidArgumentError("data sent before a file header");
  const char* name = kUploadFileNames[current_];
  if (static_cast<uint64_t>(data.size()) > static_cast<uint64_t>(current_left_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("file ", name, ": more bytes than its declared size ", sizes_[current_]));
  }
  RETURN_IF_ERROR(WriteAll(fd_, data, absl::StrCat(root_.path(), "/", tmp_, "/", name)));
  hash_.Update(data);
  current_left_ -= static_cast<int64_t>(data.size());
  bytes_ += static_cast<int64_t>(data.size());
  return absl::OkStatus();
}

absl::Status UploadWriter::CloseCurrent() {
  if (current_ < 0) return absl::OkStatus();
  const char* name = kUploadFileNames[current_];
  if (current_left_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat("file ", name, ": declared ", sizes_[current_],
                                                   " bytes but ", sizes_[current_] - current_left_, " arrived"));
  }
  const int fd = fd_;
  fd_ = -1;
  const bool synced = ::fsync(fd) == 0;
  if (::close(fd) != 0 || !synced) return Errno(absl::StrCat("closing ", name));
  done_.push_back(UploadedFileDigest{name, sizes_[current_], hash_.Finish()});
  current_ = -1;
  return absl::OkStatus();
}

absl::Status UploadWriter::CheckSplit(bool train, UploadSummary* summary) const {
  const int images = train ? 0 : 2;
  if (!present_[images] && !present_[images + 1] && !train) return absl::OkStatus();
  for (int i : {images, images + 1}) {
    if (!present_[i]) {
      return absl::InvalidArgumentError(absl::StrCat("file ", kUploadFileNames[i], " is missing",
                                                     train ? "" : " (send both test files or neither)"));
    }
  }
  const std::string dir = absl::StrCat(root_.path(), "/", tmp_, "/");
  IdxHeader h[2];
  for (int k = 0; k < 2; ++k) {
    const char* name = kUploadFileNames[images + k];
    const std::string path = dir + name;
    absl::StatusOr<IdxHeader> header = ReadIdxHeader(path, k == 0 ? -1 : 1);
    if (!header.ok()) return absl::InvalidArgumentError(absl::StrCat("file ", name, ": ", header.status().message()));
    if (k == 0 && header->example_shape.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("file ", name, ": an images file needs rank >= 2, found rank 1"));
    }
    if (!IsGzip(path) && IdxFileBytes(*header) != sizes_[images + k]) {
      return absl::InvalidArgumentError(absl::StrCat("file ", name, ": ", sizes_[images + k],
                                                     " bytes, but its IDX header describes ",
                                                     IdxFileBytes(*header)));
    }
    h[k] = *std::move(header);
  }
  if (h[0].count != h[1].count) {
    return absl::InvalidArgumentError(absl::StrCat("file ", kUploadFileNames[images], " holds ", h[0].count,
                                                   " examples but ", kUploadFileNames[images + 1], " holds ",
                                                   h[1].count, " labels"));
  }
  (train ? summary->train_examples : summary->test_examples) = h[0].count;
  return absl::OkStatus();
}

absl::StatusOr<UploadSummary> UploadWriter::Finish() {
  RETURN_IF_ERROR(CloseCurrent());
  UploadSummary s;
  RETURN_IF_ERROR(CheckSplit(/*train=*/true, &s));
  RETURN_IF_ERROR(CheckSplit(/*train=*/false, &s));
  s.bytes = bytes_;
  s.files = done_;
  s.id = UploadIdOf(done_);
  id_ = s.id;
  return s;
}

absl::Status UploadWriter::WriteExtra(absl::string_view name, absl::string_view contents) {
  const std::string rel = absl::StrCat(tmp_, "/", name);
  ASSIGN_OR_RETURN(const int fd, root_.OpenFile(rel, O_WRONLY | O_CREAT | O_TRUNC, 0600));
  made_.push_back(std::string(name));
  absl::Status s = WriteAll(fd, contents, rel);
  if (::close(fd) != 0 && s.ok()) s = Errno(absl::StrCat("closing ", rel));
  return s;
}

absl::StatusOr<bool> UploadWriter::Commit() {
  if (id_.empty()) return absl::FailedPreconditionError("UploadWriter::Commit before a successful Finish");
  const std::string from = absl::StrCat(root_.path(), "/", tmp_);
  const std::string to = absl::StrCat(root_.path(), "/", id_);
  struct stat st;
  if (::lstat(to.c_str(), &st) == 0) return false;  // the destructor removes this copy
  if (::rename(from.c_str(), to.c_str()) != 0) {
    if (errno == EEXIST || errno == ENOTEMPTY) return false;  // another transfer of the same dataset won
    return Errno(absl::StrCat("rename ", from, " to ", to));
  }
  committed_ = true;
  return true;
}

void RemoveStaleUploads(const ConfinedRoot& root) {
  DIR* d = ::opendir(root.path().c_str());
  if (d == nullptr) return;
  std::vector<std::string> stale;
  while (struct dirent* e = ::readdir(d)) {
    if (absl::StartsWith(e->d_name, kTmpPrefix)) stale.push_back(absl::StrCat(root.path(), "/", e->d_name));
  }
  ::closedir(d);
  for (const std::string& dir : stale) RemoveFlatDir(dir);
}

absl::StatusOr<std::vector<UploadedFileDigest>> StoredUploadFiles(const ConfinedRoot& root, const std::string& id) {
  RETURN_IF_ERROR(CheckUploadId(id));
  std::vector<UploadedFileDigest> files;
  for (const char* name : kUploadFileNames) {
    ASSIGN_OR_RETURN(const std::string path, root.Resolve(absl::StrCat(id, "/", name), /*create_dirs=*/false));
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;
      return Errno(absl::StrCat("stat ", path));
    }
    files.push_back(UploadedFileDigest{name, static_cast<int64_t>(st.st_size), {}});
  }
  if (files.empty()) return absl::NotFoundError(absl::StrCat("no uploaded dataset ", id, " under ", root.path()));
  return files;
}

}  // namespace data
}  // namespace weft
