// X.509 certificates for weft's mutual TLS: a cluster CA, the identities it
// signs, and the checks a process makes on its own files before it serves.
//
// A cluster directory DIR holds the CA, `ca.crt` (PEM) and `ca.key` (PEM,
// mode 0600), and the identities issued from it, `<base>.crt` (0644) and
// `<base>.key` (0600), where <base> is CertFileBase(name). Keys are EC P-256,
// signatures SHA-256, serial numbers 128 random bits.
//
// An identity is the subject of a leaf certificate: CN is its name and O its
// role.
//   O=weft:cluster  a daemon: CN "master" or a task "/job:NAME/task:N"
//                   (NAME matches [a-z][a-z0-9_-]*, N has no leading zeros);
//                   extendedKeyUsage serverAuth and clientAuth.
//   O=weft:user     a user: CN matches [A-Za-z0-9][A-Za-z0-9._@-]{0,63} and
//   O=weft:admin    is neither "master" nor "ca"; extendedKeyUsage clientAuth.
// subjectAltName holds the hosts a daemon serves as (IP or DNS entries);
// cluster identities issued without hosts get localhost and 127.0.0.1.
//
// Files are written to a temporary name in DIR, fsynced and renamed into
// place, so a reader sees the old file or the new one, never a torn one.
//
// Thread-safety: every function is thread-safe (no shared state; OpenSSL 3
// is thread-safe). Two processes issuing the same name into one DIR at once
// race: one of them fails with ALREADY_EXISTS unless `overwrite` is set.
#ifndef WEFT_COMMON_CERTS_H_
#define WEFT_COMMON_CERTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace weft {

enum class Role { kCluster, kUser, kAdmin };

// "cluster", "user", "admin".
std::string RoleName(Role r);
// The inverse of RoleName; INVALID_ARGUMENT naming the string otherwise.
absl::StatusOr<Role> ParseRole(absl::string_view name);

// Who a certificate says its holder is.
struct PeerIdentity {
  std::string name;  // the subject CN: "master", "/job:worker/task:1", "alice"
  Role role = Role::kCluster;
};

// Creates DIR (0700, with any missing parents) and a self-signed CA in it:
// DIR/ca.crt and DIR/ca.key, valid for `days` days, subject CN
// `common_name`. ALREADY_EXISTS naming the file if ca.crt or ca.key exists
// and !overwrite (nothing is written then); INVALID_ARGUMENT for days
// outside [1, 36500].
absl::Status CreateCa(const std::string& dir, int days = 3650, bool overwrite = false,
                      const std::string& common_name = "weft cluster CA");

struct IssueOptions {
  // "master", "/job:NAME/task:N" or a user name.
  std::string name;
  // IP addresses (v4 or v6) and DNS names ("*.example.com" allowed). Empty:
  // localhost and 127.0.0.1 for a cluster identity, no SAN for a user.
  std::vector<std::string> hosts;
  // kCluster for master and tasks; kUser or kAdmin for user names.
  Role role = Role::kCluster;
  int days = 365;  // [1, 36500]
  bool overwrite = false;
};

// Generates a key pair for `options.name`, signs it with DIR's CA and writes
// DIR/<base>.crt and DIR/<base>.key (base: CertFileBase). Returns the
// certificate's path; the key's is the same with ".key" for ".crt".
// INVALID_ARGUMENT naming the bad name, host, days or name/role combination
// (master and task names must be kCluster, user names must not be);
// NOT_FOUND naming the file when DIR has no CA; FAILED_PRECONDITION when
// ca.key does not match ca.crt or ca.crt is not a CA; ALREADY_EXISTS naming
// the file when a file exists and !overwrite (nothing is written then).
absl::StatusOr<std::string> IssueCertificate(const std::string& dir, const IssueOptions& options);

// The file base name of an identity: "master" -> "master",
// "/job:worker/task:1" -> "worker-1", "alice" -> "alice". INVALID_ARGUMENT
// saying what is wrong with any other name.
absl::StatusOr<std::string> CertFileBase(const std::string& name);

// Whether `name` is a cluster member's name: "master" or a task name.
bool IsClusterName(absl::string_view name);

// The identity in the first certificate of `pem`. Does not verify the
// signature or validity period (the TLS handshake or CheckCredentialFiles
// does). UNAUTHENTICATED naming what is wrong: not a PEM certificate, no CN
// or more than one, O missing or not one of weft:cluster|weft:user|
// weft:admin, a cluster certificate whose CN is not master or a task name,
// a user or admin certificate whose CN is not a user name.
absl::StatusOr<PeerIdentity> IdentityFromPem(absl::string_view pem);

// Checks a process's credential files before it starts serving: each file
// exists and parses (CA certificate, certificate, unencrypted private key,
// all PEM), the key matches the certificate, the certificate chains to the
// CA and is within its validity period, and its subject is a weft identity.
// NOT_FOUND for a missing file, FAILED_PRECONDITION otherwise, naming the
// file and what is wrong ("certificate /x/worker-1.crt was not signed by the
// CA in /x/ca.crt"). Returns the certificate's identity.
absl::StatusOr<PeerIdentity> CheckCredentialFiles(const std::string& ca_file, const std::string& cert_file,
                                                  const std::string& key_file);

// What `weft certs show` prints about a certificate.
struct CertificateInfo {
  std::string subject;  // RFC 2253: "CN=master,O=weft:cluster"
  std::string issuer;
  std::string serial;  // hex
  bool is_ca = false;
  std::vector<std::string> dns_names;     // subjectAltName DNS entries
  std::vector<std::string> ip_addresses;  // subjectAltName IP entries, as text
  absl::Time not_before;
  absl::Time not_after;
};

// Parses the first certificate of `pem`. INVALID_ARGUMENT when it is not one.
absl::StatusOr<CertificateInfo> DescribeCertificate(absl::string_view pem);

// The contents of a PEM file (at most 1 MiB): NOT_FOUND when missing,
// FAILED_PRECONDITION when unreadable or too large; `what` ("certificate",
// "CA certificate", "private key") starts the message.
absl::StatusOr<std::string> ReadPemFile(const std::string& path, absl::string_view what);

}  // namespace weft

#endif  // WEFT_COMMON_CERTS_H_
