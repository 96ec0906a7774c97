// ConfinedRoot: a directory that file names taken from network requests are
// confined to (checkpoint shards, uploaded artifacts, job state).
//
// A name from a request is never trusted as a path. CheckRelative rejects
// absolute names, "..", "." and empty components, NUL bytes and oversized
// names by their text; Resolve and OpenFile then walk the name one component
// at a time from the root with openat(O_NOFOLLOW | O_DIRECTORY), so no
// symbolic link below the root is ever followed: a link anywhere on the way,
// or as the final component, is refused with PERMISSION_DENIED, whether it
// points outside the root or inside it (one simple rule, no link chasing).
// The root itself is canonicalised with realpath() once, in Open, so a root
// configured through a symbolic link works.
//
// The final component must be a regular file or a directory (or missing, for
// a file to create): FIFOs, sockets and devices are refused, and OpenFile
// never blocks on a FIFO (it opens with O_NONBLOCK and checks the type of
// what it opened).
//
// OpenFile is the race-free way in: the descriptor it returns is the file the
// walk reached. Resolve returns a path string, which is checked only at the
// time of the call; use it only where nothing untrusted can rename entries
// below the root between the check and the use. Hard links are not detected:
// whoever can write inside the root must not be able to link files from
// outside into it.
//
// Errors name what was refused and where, with the errno text for failed
// calls, and the code follows the errno (ENOENT -> NOT_FOUND, EEXIST ->
// ALREADY_EXISTS, EACCES -> PERMISSION_DENIED, ...):
//   openat("ckpt/step-7") under root /var/lib/weft: No such file or directory
//   "ckpt/link" under root /var/lib/weft (resolving "ckpt/link/shard-0") is
//     a symbolic link; links are not followed below the root
// Names from requests are C-escaped in messages, so a log line cannot be
// forged with a newline in a name.
//
// Linux only. Thread-safety: a ConfinedRoot is immutable after Open and safe
// to use from any number of threads; it is cheap to copy.
#ifndef WEFT_COMMON_CONFINED_ROOT_H_
#define WEFT_COMMON_CONFINED_ROOT_H_

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace weft {

class ConfinedRoot {
 public:
  // Limits CheckRelative enforces on a name from a request.
  static constexpr size_t kMaxRelativeBytes = 4096;
  static constexpr size_t kMaxComponents = 64;
  static constexpr size_t kMaxComponentBytes = 255;

  // Makes `root` absolute and canonical (realpath), first creating it and its
  // missing parents with mode 0700 when `create`. INVALID_ARGUMENT for an
  // empty root; FAILED_PRECONDITION when it is not a directory; otherwise the
  // errno of the failing call, naming the path.
  static absl::StatusOr<ConfinedRoot> Open(const std::string& root, bool create = true);

  // The canonical absolute root, without a trailing slash ("/" for the file
  // system root).
  const std::string& path() const { return path_; }

  // Checks a relative name from a request: non-empty, not absolute, no
  // empty, "." or ".." components, no NUL byte, at most kMaxRelativeBytes
  // bytes and kMaxComponents components of at most kMaxComponentBytes bytes
  // each. INVALID_ARGUMENT naming the name and the rule it breaks. Touches no
  // file.
  static absl::Status CheckRelative(absl::string_view relative);

  // Returns the name relative to the root of either a relative name (checked
  // with CheckRelative and returned as is) or an absolute path. An absolute
  // path has its empty and "." components removed and must then lie under
  // path() component by component, else PERMISSION_DENIED "path P is outside
  // the root R"; one with a ".." component, or naming the root itself, is
  // INVALID_ARGUMENT. Purely lexical: touches no file.
  absl::StatusOr<std::string> Relativize(absl::string_view path_or_relative) const;

  // Walks `relative` (CheckRelative first) from the root, opening each
  // directory with openat(O_NOFOLLOW | O_DIRECTORY | O_CLOEXEC) and, when
  // `create_dirs`, creating missing ones with mkdirat(0700). A symbolic link
  // anywhere is PERMISSION_DENIED naming the component; a non-directory on
  // the way is FAILED_PRECONDITION. The last component may be missing; if it
  // exists it must be a regular file or a directory (PERMISSION_DENIED
  // otherwise). Returns path() + "/" + relative. See the header comment for
  // why OpenFile is preferred.
  absl::StatusOr<std::string> Resolve(absl::string_view relative, bool create_dirs) const;

  // The same walk for the directories of `relative`, then
  // openat(flags | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, mode) for the last
  // component, which must turn out to be a regular file or a directory.
  // Returns an open descriptor that the caller owns and closes. Typical
  // flags: O_RDONLY to read; O_WRONLY | O_CREAT | O_EXCL with mode 0600 to
  // create (ALREADY_EXISTS when the file is there). The umask applies to
  // `mode` as usual.
  absl::StatusOr<int> OpenFile(absl::string_view relative, int flags, mode_t mode = 0600,
                               bool create_dirs = false) const;

 private:
  explicit ConfinedRoot(std::string path) : path_(std::move(path)) {}

  std::string path_;
};

// Creates `dir` and its missing parents with mode 0700 (the umask can only
// narrow it); directories that exist are left as they are. For state and
// checkpoint directories, which no other user should read. The path is the
// operator's, not a request's: symbolic links in it are followed.
// FAILED_PRECONDITION when `dir` or a parent exists and is not a directory.
absl::Status CreatePrivateDirs(const std::string& dir);

}  // namespace weft

#endif  // WEFT_COMMON_CONFINED_ROOT_H_
