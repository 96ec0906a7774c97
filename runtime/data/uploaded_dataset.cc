#include "runtime/data/uploaded_dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"

namespace weft {
namespace data {
namespace {

absl::Mutex g_upload_mu;
std::optional<absl::StatusOr<ConfinedRoot>>* g_upload_root ABSL_GUARDED_BY(g_upload_mu) = nullptr;

}  // namespace

int UploadFileIndex(absl::string_view name) {
  for (int i = 0; i < kNumUploadFiles; ++i) {
    if (name == kUploadFileNames[i]) return i;
  }
  return -1;
}

absl::Status CheckUploadId(absl::string_view id) {
  bool ok = id.size() == 64;
  for (char c : id) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (ok) return absl::OkStatus();
  const absl::string_view shown = id.substr(0, 80);
  return absl::InvalidArgumentError(absl::StrCat("upload_id \"", absl::CEscape(shown), id.size() > 80 ? "..." : "",
                                                 "\" is not a dataset id (64 lowercase hex digits, as "
                                                 "UploadDataset answered)"));
}

std::string UploadIdOf(std::vector<UploadedFileDigest> files) {
  std::sort(files.begin(), files.end(), [](const UploadedFileDigest& a, const UploadedFileDigest& b) {
    return UploadFileIndex(a.name) < UploadFileIndex(b.name);
  });
  Sha256 h;
  for (const UploadedFileDigest& f : files) {
    h.Update(f.name);
    h.Update(absl::string_view("\0", 1));
    char size[8];
    const uint64_t n = static_cast<uint64_t>(f.size);
    for (int i = 0; i < 8; ++i) size[i] = static_cast<char>((n >> (56 - 8 * i)) & 0xff);
    h.Update(absl::string_view(size, 8));
    h.Update(absl::string_view(reinterpret_cast<const char*>(f.sha256.data()), f.sha256.size()));
  }
  return Sha256::Hex(h.Finish());
}

void SetUploadRoot(std::optional<absl::StatusOr<ConfinedRoot>> root) {
  absl::MutexLock lock(&g_upload_mu);
  if (g_upload_root == nullptr) g_upload_root = new std::optional<absl::StatusOr<ConfinedRoot>>();
  *g_upload_root = std::move(root);
}

absl::StatusOr<std::string> UploadedFilePath(const std::string& id, absl::string_view name) {
  RETURN_IF_ERROR(CheckUploadId(id));
  if (UploadFileIndex(name) < 0) {
    return absl::InvalidArgumentError(absl::StrCat("no file \"", absl::CEscape(name), "\" in an uploaded dataset"));
  }
  std::optional<ConfinedRoot> root;
  {
    absl::MutexLock lock(&g_upload_mu);
    if (g_upload_root == nullptr || !g_upload_root->has_value()) {
      return absl::FailedPreconditionError(
          absl::StrCat("upload_id ", id, ": this process keeps no uploaded datasets"));
    }
    if (!(*g_upload_root)->ok()) {
      return absl::FailedPreconditionError(absl::StrCat("upload_id ", id, ": this process keeps no uploaded datasets (",
                                                        (*g_upload_root)->status().message(), ")"));
    }
    root = ***g_upload_root;
  }
  ASSIGN_OR_RETURN(std::string path, root->Resolve(absl::StrCat(id, "/", name), /*create_dirs=*/false));
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("uploaded dataset ", id, " has no ", name, " here (under ",
                                              root->path(), ")"));
    }
    return absl::InternalError(absl::StrCat("stat ", path, ": ", std::strerror(errno)));
  }
  return path;
}

}  // namespace data
}  // namespace weft
