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

// Drains the error queue: " (error:...; error:...)", or "" when empty.
std::string SslErrors() {
  std::vector<std::string> errors;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    errors.push_back(buf);
  }
  return errors.empty() ? "" : absl::StrCat(" (", absl::StrJoin(errors, "; "), ")");
}

std::string Quote(absl::string_view s) { return absl::StrCat("\"", absl::CHexEscape(s), "\""); }

std::string JoinPath(absl::string_view dir, absl::string_view file) {
  while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
  return absl::StrCat(dir, dir == "/" ? "" : "/", file);
}

// ---- Names and hosts -------------------------------------------------------

bool IsJobName(absl::string_view s) {
  if (s.empty() || !absl::ascii_islower(s[0])) return false;
  for (char c : s) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '_' && c != '-') return false;
  }
  return true;
}

// "/job:NAME/task:N" -> "NAME-N"; false for any other string.
bool TaskFileBase(absl::string_view name, std::string* base) {
  if (name.size() > kMaxNameLength || !absl::ConsumePrefix(&name, "/job:")) return false;
  const size_t slash = name.find("/task:");
  if (slash == absl::string_view::npos) return false;
  const absl::string_view job = name.substr(0, slash);
  const absl::string_view index = name.substr(slash + 6);
  if (!IsJobName(job) || index.empty() || index.size() > 9 || (index.size() > 1 && index[0] == '0')) return false;
  for (char c : index) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  *base = absl::StrCat(job, "-", index);
  return true;
}

bool IsUserName(absl::string_view s) {
  if (s.empty() || s.size() > kMaxNameLength || !absl::ascii_isalnum(s[0]) || s == "master" || s == "ca") return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '@' && c != '-') return false;
  }
  return true;
}

bool IsIpAddress(const std::string& host) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

// RFC 1123 host names, optionally with a leading "*." wildcard label; the
// last label may not be all digits (so "1.2.3" is not taken for a name).
bool IsDnsName(absl::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  absl::ConsumePrefix(&host, "*.");
  std::vector<absl::string_view> labels = absl::StrSplit(host, '.');
  for (absl::string_view label : labels) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
    for (char c : label) {
      if (!absl::ascii_isalnum(c) && c != '-') return false;
    }
  }
  for (char c : labels.back()) {
    if (!absl::ascii_isdigit(c)) return true;
  }
  return false;
}

absl::Status CheckHost(const std::string& host) {
  if (IsIpAddress(host) || IsDnsName(host)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("host ", Quote(host),
                   " is neither an IP address nor a DNS name (such as worker-1.example.com or *.example.com)"));
}

absl::Status CheckDays(int days) {
  if (days >= 1 && days <= kMaxDays) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("validity of ", days, " days is outside [1, ", kMaxDays, "]"));
}

const char* OrgOf(Role role) {
  switch (role) {
    case Role::kCluster:
      return kOrgCluster;
    case Role::kUser:
      return kOrgUser;
    case Role::kAdmin:
      return kOrgAdmin;
  }
  return kOrgUser;
}

}  // namespace certs_internal
}  // namespace weft
