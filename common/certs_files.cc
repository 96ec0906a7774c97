#include "common/certs_internal.h"


#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace weft {
namespace certs_internal {

// ---- Files -------------------------------------------------------------------

absl::Status ErrnoError(absl::string_view what, const std::string& path, int err) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " ", path));
}

// mkdir -p with mode 0700 for every directory it creates.
absl::Status MakeDirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    const std::string prefix = dir.substr(0, i);
    if (mkdir(prefix.c_str(), 0700) == 0) {
      if (chmod(prefix.c_str(), 0700) != 0) return ErrnoError("cannot chmod directory", prefix, errno);
    } else if (errno != EEXIST) {
      return ErrnoError("cannot create directory", prefix, errno);
    }
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return ErrnoError("cannot stat directory", dir, errno);
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(dir, " is not a directory"));
  return absl::OkStatus();
}

absl::Status RefuseExisting(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (access(path.c_str(), F_OK) == 0) {
      return absl::AlreadyExistsError(absl::StrCat(path, " already exists; refusing to overwrite it"));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteAndSync(int fd, absl::string_view data, mode_t mode, const std::string& path) {
  if (fchmod(fd, mode) != 0) return ErrnoError("cannot chmod", path, errno);
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("cannot write", path, errno);
    data.remove_prefix(static_cast<size_t>(n));
  }
  if (fsync(fd) != 0) return ErrnoError("cannot fsync", path, errno);
  return absl::OkStatus();
}

// Moves `tmp` to `path`; without `overwrite`, atomically refuses an existing
// `path` (renameat2 RENAME_NOREPLACE, or a check first where the file
// system lacks it).
absl::Status CommitRename(const std::string& tmp, const std::string& path, bool overwrite) {
  if (!overwrite) {
    if (renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0) return absl::OkStatus();
    if (errno != EINVAL && errno != ENOSYS) {
      if (errno == EEXIST) return RefuseExisting({path});
      return ErrnoError("cannot rename to", path, errno);
    }
    RETURN_IF_ERROR(RefuseExisting({path}));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoError("cannot rename to", path, errno);
  return absl::OkStatus();
}

// Writes `data` to a new file in `path`'s directory (open O_CREAT|O_EXCL,
// `mode`), fsyncs it, renames it to `path` and fsyncs the directory.
absl::Status WriteFileAtomically(const std::string& dir, const std::string& path, absl::string_view data, mode_t mode,
                                 bool overwrite) {
  unsigned char r[6];
  if (RAND_bytes(r, sizeof(r)) != 1) return absl::InternalError(absl::StrCat("RAND_bytes failed", SslErrors()));
  const std::string tmp =
      absl::StrCat(path, ".tmp-", absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(r), sizeof(r))));
  const int fd = open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoError("cannot create", tmp, errno);
  absl::Status s = WriteAndSync(fd, data, mode, tmp);
  if (close(fd) != 0 && s.ok()) s = ErrnoError("cannot close", tmp, errno);
  if (s.ok()) s = CommitRename(tmp, path, overwrite);
  if (!s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return ErrnoError("cannot open directory", dir, errno);
  const int rc = fsync(dfd);
  const int err = errno;
  close(dfd);
  if (rc != 0) return ErrnoError("cannot fsync directory", dir, err);
  return absl::OkStatus();
}

}  // namespace certs_internal
}  // namespace weft
