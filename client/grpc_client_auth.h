// How the `weft` client commands prove who they are to a master, from
// flags or the environment:
//
//   --ca=FILE          WEFT_CA          the cluster CA, to verify the master
//   --cert/--key=FILE  WEFT_CERT/_KEY   a user certificate (weft certs issue)
//   --token_file=FILE  WEFT_TOKEN_FILE  or a bearer token instead
//   --insecure                          a master started with --insecure
//
// A flag wins over its variable. Without any of them the command refuses to
// run rather than fall back to plaintext.
//
// Thread-safety: plain functions.
#ifndef WEFT_CLIENT_GRPC_CLIENT_AUTH_H_
#define WEFT_CLIENT_GRPC_CLIENT_AUTH_H_

#include <memory>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "client/flags.h"
#include "grpcpp/security/credentials.h"

namespace weft {

struct ClientCredentialFiles {
  std::string ca, cert, key, token_file;
  bool insecure = false;
};

// The flags above, for Flags::Parse: valued and boolean.
const std::set<std::string>& ClientAuthValuedFlags();
const std::set<std::string>& ClientAuthBooleanFlags();

// The files named by `f` or the environment.
ClientCredentialFiles ClientCredentialFilesFrom(const Flags& f);

// Channel credentials for a master: TLS against the CA with the user's
// certificate, or with a bearer token on every call (gRPC sends call
// credentials only over TLS); plaintext when insecure. The error names
// the file at fault or the missing flag.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientChannelCredentials(const ClientCredentialFiles& files);

}  // namespace weft

#endif  // WEFT_CLIENT_GRPC_CLIENT_AUTH_H_
