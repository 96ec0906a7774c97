// Caller: who made a request, as the transport proved it, and the checks
// every service makes with it. Free of gRPC: the adapters build a Caller
// from the connection (common/grpc_security.h) and the core logic decides.
//
// Identities (docs/security.md):
//   - cluster members: "master" and tasks ("/job:worker/task:1"), from a
//     certificate the cluster CA signed with O=weft:cluster;
//   - users, from a certificate with O=weft:user or O=weft:admin, or from a
//     bearer token of the master's --auth_tokens_file;
//   - kInsecure: a daemon started with --insecure has no identities at all
//     and lets every caller do everything (the explicit opt-out).
//
// Thread-safety: plain values.
#ifndef WEFT_COMMON_CALLER_H_
#define WEFT_COMMON_CALLER_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace weft {

struct Caller {
  enum class Kind { kInsecure, kCluster, kUser };
  Kind kind = Kind::kInsecure;
  // "master", "/job:worker/task:1", or a user name; empty for kInsecure.
  std::string name;
  // Users only: may act on every user's jobs and Reset the master.
  bool admin = false;
  // How the identity was proved: "certificate" or "token" ("" insecure).
  std::string credential;

  static Caller Insecure() { return Caller(); }
  bool insecure() const { return kind == Kind::kInsecure; }
  // "user alice (token)", "task /job:worker/task:1 (certificate)", ...
  std::string Describe() const;
  // The name a job or session it creates is owned by ("" when insecure).
  const std::string& owner() const { return name; }
};

// PERMISSION_DENIED unless the caller is a cluster member (or insecure).
// `what` names the call: "WorkerService.RunGraph".
absl::Status RequireClusterMember(const Caller& caller, absl::string_view what);
// PERMISSION_DENIED unless the caller is the master (or insecure).
absl::Status RequireMaster(const Caller& caller, absl::string_view what);
// PERMISSION_DENIED unless the caller is a user or admin (or insecure).
absl::Status RequireUser(const Caller& caller, absl::string_view what);
// PERMISSION_DENIED unless the caller is an admin (or insecure).
absl::Status RequireAdmin(const Caller& caller, absl::string_view what);
// PERMISSION_DENIED unless the caller owns the object (`owner`), is an
// admin, or is insecure. `object` names it: "job job-3f2a...".
absl::Status RequireOwnerOrAdmin(const Caller& caller, absl::string_view owner, absl::string_view object);

}  // namespace weft

#endif  // WEFT_COMMON_CALLER_H_
