// Certificates for integration tests that start real daemons: a throwaway
// cluster CA under a test directory, a certificate per daemon (for
// 127.0.0.1) and users, and the flags that hand them to `weft`.
//
// Thread-safety: not thread-safe; build once per test fixture.
#ifndef WEFT_TESTS_TEST_TLS_H_
#define WEFT_TESTS_TEST_TLS_H_

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/grpc_master_client.h"
#include "common/certs.h"
#include "grpcpp/security/credentials.h"

namespace weft {
namespace testing {

class TestTls {
 public:
  // A new CA in `dir` (created).
  static absl::StatusOr<TestTls> Create(const std::string& dir);

  const std::string& dir() const { return dir_; }
  std::string ca() const { return dir_ + "/ca.crt"; }
  // Issues (once) and returns the --ca/--cert/--key flags for a daemon:
  // "master", "/job:worker/task:0", ...
  std::vector<std::string> DaemonFlags(const std::string& identity);
  // Plain gRPC SSL channel credentials that present `identity`'s certificate
  // from this CA and trust the servers of the CA in `trusted_ca_file`
  // (this one's when empty): how a test speaks as a daemon, a compromised
  // one included, or as a daemon of another cluster.
  std::shared_ptr<grpc::ChannelCredentials> DaemonCredentials(const std::string& identity,
                                                              const std::string& trusted_ca_file = "");
  // The cert and key of a user (issued once), role kUser or kAdmin.
  absl::StatusOr<std::pair<std::string, std::string>> User(const std::string& name, Role role = Role::kUser);
  // MasterClient options that authenticate as `user` (an admin by default).
  MasterClientOptions ClientOptions(const std::string& user = "tester", Role role = Role::kAdmin);
  // The cert and key of `name` in `role` (issued once): for connections
  // made outside gRPC (common/tls_socket.h).
  absl::StatusOr<std::pair<std::string, std::string>> Issue(const std::string& name, Role role);

 private:
  explicit TestTls(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
  std::set<std::string> issued_;  // by this CA
};

}  // namespace testing
}  // namespace weft

#endif  // WEFT_TESTS_TEST_TLS_H_
