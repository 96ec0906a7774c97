#include "common/token_table.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"

namespace weft {
namespace {

constexpr size_t kMinTokenLength = 16;

std::array<unsigned char, 32> Digest(absl::string_view token) {
  std::array<unsigned char, 32> d;
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), d.data());
  return d;
}

bool TokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '~' || c == '+' ||
         c == '/' || c == '=' || c == '-';
}

struct FileInfo {
  int64_t mtime_ns = 0;
  int64_t size = 0;
};

absl::StatusOr<FileInfo> Stat(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("token file ", path, ": ", std::strerror(errno)));
  }
  // Group access is allowed: Kubernetes mounts a Secret group-readable for
  // the pod's fsGroup. Anyone else is not.
  if ((st.st_mode & 007) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("token file ", path, " is open to other users (mode ",
                                                    absl::StrFormat("%04o", st.st_mode & 07777),
                                                    "): chmod 600 it"));
  }
  return FileInfo{static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                  static_cast<int64_t>(st.st_size)};
}

absl::StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("token file ", path, " cannot be read: ", std::strerror(errno)));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

absl::StatusOr<std::vector<TokenTable::Entry>> TokenTable::Parse(absl::string_view text, absl::string_view source) {
  std::vector<Entry> entries;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_no, ": expected 'TOKEN USER ROLE', found ", fields.size(), " fields"));
    }
    const absl::string_view token = fields[0];
    if (token.size() < kMinTokenLength) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_no, ": the token is shorter than ", kMinTokenLength, " characters"));
    }
    for (char c : token) {
      if (!TokenChar(c)) {
        return absl::InvalidArgumentError(absl::StrCat(source, ":", line_no, ": the token has a character outside "
                                                                             "[A-Za-z0-9._~+/=-]"));
      }
    }
    if (fields[2] != "user" && fields[2] != "admin") {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_no, ": role '", fields[2], "' is neither 'user' nor 'admin'"));
    }
    if (fields[1] == "master" || fields[1][0] == '/') {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_no, ": user name '", fields[1], "' is reserved for the cluster"));
    }
    Entry e{Digest(token), TokenUser{std::string(fields[1]), fields[2] == "admin"}};
    for (const Entry& other : entries) {
      if (CRYPTO_memcmp(other.digest.data(), e.digest.data(), e.digest.size()) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(source, ":", line_no, ": the token is listed twice"));
      }
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

absl::StatusOr<std::unique_ptr<TokenTable>> TokenTable::FromText(absl::string_view text, absl::string_view source) {
  auto entries = Parse(text, source);
  if (!entries.ok()) return entries.status();
  std::unique_ptr<TokenTable> t(new TokenTable());
  absl::MutexLock lock(&t->mu_);
  t->entries_ = *std::move(entries);
  return t;
}

absl::StatusOr<std::unique_ptr<TokenTable>> TokenTable::Load(const std::string& path) {
  auto info = Stat(path);
  if (!info.ok()) return info.status();
  auto text = ReadAll(path);
  if (!text.ok()) return text.status();
  auto t = FromText(*text, path);
  if (!t.ok()) return t.status();
  (*t)->path_ = path;
  absl::MutexLock lock(&(*t)->mu_);
  (*t)->mtime_ns_ = info->mtime_ns;
  (*t)->size_ = info->size;
  (*t)->last_check_ = absl::Now();
  return t;
}

void TokenTable::MaybeReload() {
  if (path_.empty()) return;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (now - last_check_ < absl::Seconds(1)) return;
    last_check_ = now;
  }
  auto info = Stat(path_);
  absl::StatusOr<std::vector<Entry>> entries = absl::UnknownError("");
  {
    absl::MutexLock lock(&mu_);
    if (info.ok() && info->mtime_ns == mtime_ns_ && info->size == size_) return;
  }
  if (info.ok()) {
    auto text = ReadAll(path_);
    entries = text.ok() ? Parse(*text, path_) : text.status();
  } else {
    entries = info.status();
  }
  if (!entries.ok()) {
    Logger("master")->error("keeping the previous tokens: {}", std::string(entries.status().message()));
    absl::MutexLock lock(&mu_);
    if (info.ok()) {
      mtime_ns_ = info->mtime_ns;
      size_ = info->size;
    }
    return;
  }
  absl::MutexLock lock(&mu_);
  entries_ = *std::move(entries);
  mtime_ns_ = info->mtime_ns;
  size_ = info->size;
  Logger("master")->info("re-read {} ({} tokens)", path_, entries_.size());
}

absl::StatusOr<TokenUser> TokenTable::Lookup(absl::string_view token) {
  MaybeReload();
  const std::array<unsigned char, 32> d = Digest(token);
  absl::MutexLock lock(&mu_);
  const Entry* found = nullptr;
  for (const Entry& e : entries_) {  // every entry, no early exit
    if (CRYPTO_memcmp(e.digest.data(), d.data(), d.size()) == 0) found = &e;
  }
  if (found == nullptr) return absl::UnauthenticatedError("the bearer token is not in the master's token file");
  return found->user;
}

size_t TokenTable::size() const {
  absl::MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace weft
