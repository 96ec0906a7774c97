#include "client/grpc_client_auth.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/grpc_security.h"

namespace weft {
namespace {

std::string FlagOrEnv(const Flags& f, const std::string& flag, const char* env) {
  if (f.Has(flag)) return f.Get(flag);
  const char* v = std::getenv(env);
  return v == nullptr ? "" : v;
}

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("token file ", path, " cannot be read: ", std::strerror(errno)));
  }
  if ((st.st_mode & 007) != 0) {  // group access: a Kubernetes Secret mount
    return absl::PermissionDeniedError(absl::StrCat("token file ", path, " is open to other users: chmod 600 it"));
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string token(absl::StripAsciiWhitespace(text.str()));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  if (token.find_first_of(" \t\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("token file ", path, " holds more than one word; it must hold "
                                                                        "only the token"));
  }
  return token;
}

}  // namespace

const std::set<std::string>& ClientAuthValuedFlags() {
  static const auto* flags = new std::set<std::string>{"ca", "cert", "key", "token_file"};
  return *flags;
}

const std::set<std::string>& ClientAuthBooleanFlags() {
  static const auto* flags = new std::set<std::string>{"insecure"};
  return *flags;
}

ClientCredentialFiles ClientCredentialFilesFrom(const Flags& f) {
  ClientCredentialFiles files;
  files.ca = FlagOrEnv(f, "ca", "WEFT_CA");
  files.cert = FlagOrEnv(f, "cert", "WEFT_CERT");
  files.key = FlagOrEnv(f, "key", "WEFT_KEY");
  files.token_file = FlagOrEnv(f, "token_file", "WEFT_TOKEN_FILE");
  files.insecure = f.GetBool("insecure");
  return files;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientChannelCredentials(const ClientCredentialFiles& files) {
  if (files.insecure) {
    if (!files.ca.empty() || !files.cert.empty() || !files.token_file.empty()) {
      return absl::InvalidArgumentError("--insecure goes without --ca, --cert, --key and --token_file");
    }
    return grpc::InsecureChannelCredentials();
  }
  if (files.ca.empty()) {
    return absl::InvalidArgumentError(
        "no credentials for the master: pass --ca (or WEFT_CA) with --cert and --key (WEFT_CERT, WEFT_KEY) or with "
        "--token_file (WEFT_TOKEN_FILE); --insecure only for a master started with --insecure");
  }
  if (files.cert.empty() && files.key.empty() && files.token_file.empty()) {
    return absl::InvalidArgumentError(
        "no user credentials: pass --cert and --key (WEFT_CERT, WEFT_KEY) or --token_file (WEFT_TOKEN_FILE)");
  }
  TlsFiles tls;
  tls.ca = files.ca;
  tls.cert = files.cert;
  tls.key = files.key;
  absl::StatusOr<std::shared_ptr<const TransportSecurity>> security = TransportSecurity::ForClient(tls);
  if (!security.ok()) return security.status();
  std::shared_ptr<grpc::ChannelCredentials> creds = (*security)->ChannelCredentials();
  if (!files.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadToken(files.token_file);
    if (!token.ok()) return token.status();
    // "authorization: Bearer TOKEN" on every call.
    creds = grpc::CompositeChannelCredentials(creds, grpc::AccessTokenCredentials(*token));
  }
  return creds;
}

}  // namespace weft
