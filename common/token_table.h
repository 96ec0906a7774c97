// TokenTable: the master's bearer tokens (--auth_tokens_file), each mapped
// to a user and a role.
//
// File format, one entry per line; blank lines and lines starting with '#'
// are ignored:
//
//   TOKEN USER ROLE        # ROLE is "user" or "admin"
//
// A token is at least 16 characters of [A-Za-z0-9._~+/=-] (generate one
// with `openssl rand -hex 32`). Only SHA-256 digests of the tokens are kept
// in memory, and Lookup compares the presented token's digest with every
// entry in constant time (CRYPTO_memcmp, no early exit), so neither the
// answer's timing nor a memory dump gives a token away.
//
// The file is re-read when its modification time or size changes (checked
// at most once a second), so tokens are added or revoked without a restart;
// a file that no longer parses keeps the previous table and logs the error.
// The file must not be open to other users (mode o=; refused otherwise);
// group access is allowed, as Kubernetes mounts Secrets for the pod's fsGroup.
//
// Thread-safety: thread-safe.
#ifndef WEFT_COMMON_TOKEN_TABLE_H_
#define WEFT_COMMON_TOKEN_TABLE_H_

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace weft {

struct TokenUser {
  std::string user;
  bool admin = false;
};

class TokenTable {
 public:
  // Reads `path`; the error names the file and line at fault.
  static absl::StatusOr<std::unique_ptr<TokenTable>> Load(const std::string& path);
  // Parses file contents (for tests); `source` names them in errors.
  static absl::StatusOr<std::unique_ptr<TokenTable>> FromText(absl::string_view text, absl::string_view source);

  // The user `token` belongs to; UNAUTHENTICATED (naming no token bytes)
  // when it is unknown.
  absl::StatusOr<TokenUser> Lookup(absl::string_view token);
  size_t size() const;

 private:
  struct Entry {
    std::array<unsigned char, 32> digest;
    TokenUser user;
  };
  static absl::StatusOr<std::vector<Entry>> Parse(absl::string_view text, absl::string_view source);
  void MaybeReload() ABSL_LOCKS_EXCLUDED(mu_);

  std::string path_;  // empty for FromText
  mutable absl::Mutex mu_;
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  absl::Time last_check_ ABSL_GUARDED_BY(mu_);
  int64_t mtime_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t size_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace weft

#endif  // WEFT_COMMON_TOKEN_TABLE_H_
