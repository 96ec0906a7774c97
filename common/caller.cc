#include "common/caller.h"

#include "absl/strings/str_cat.h"

namespace weft {

std::string Caller::Describe() const {
  switch (kind) {
    case Kind::kInsecure:
      return "an unauthenticated caller (insecure mode)";
    case Kind::kCluster:
      return absl::StrCat(name == "master" ? "the master" : absl::StrCat("task ", name), " (", credential, ")");
    case Kind::kUser:
      return absl::StrCat(admin ? "admin " : "user ", name, " (", credential, ")");
  }
  return "unknown caller";
}

absl::Status RequireClusterMember(const Caller& caller, absl::string_view what) {
  if (caller.insecure() || caller.kind == Caller::Kind::kCluster) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(what, " serves only the cluster's master and tasks (a certificate "
                                                  "with O=weft:cluster); ",
                                                  caller.Describe(), " may not call it"));
}

absl::Status RequireMaster(const Caller& caller, absl::string_view what) {
  if (caller.insecure() || (caller.kind == Caller::Kind::kCluster && caller.name == "master")) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat(what, " may be called only by the master (certificate CN=master); ", caller.Describe(), " may not"));
}

absl::Status RequireUser(const Caller& caller, absl::string_view what) {
  if (caller.insecure() || caller.kind == Caller::Kind::kUser) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      what, " serves users (a certificate with O=weft:user or weft:admin, or a bearer token); ", caller.Describe(),
      " is not one"));
}

absl::Status RequireAdmin(const Caller& caller, absl::string_view what) {
  if (caller.insecure() || (caller.kind == Caller::Kind::kUser && caller.admin)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(what, " needs the admin role; ", caller.Describe(), " does not have it"));
}

absl::Status RequireOwnerOrAdmin(const Caller& caller, absl::string_view owner, absl::string_view object) {
  if (caller.insecure()) return absl::OkStatus();
  if (caller.kind == Caller::Kind::kUser && (caller.admin || caller.name == owner)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(object, " belongs to ",
                                                  owner.empty() ? "no user (submitted without credentials)"
                                                                : absl::StrCat("user ", owner),
                                                  "; ", caller.Describe(), " may not touch it"));
}

}  // namespace weft
