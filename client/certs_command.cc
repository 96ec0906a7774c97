#include "client/certs_command.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/flags.h"
#include "common/certs.h"

namespace weft {
namespace {

constexpr char kUsage[] =
    "usage: weft certs init DIR [--days=N] [--name=CA_NAME] [--force]\n"
    "       weft certs issue DIR --name=NAME [--hosts=H1,H2,...] [--role=cluster|user|admin] [--days=N] [--force]\n"
    "       weft certs show FILE\n";

// Bad usage: the message, then how to call the command.
int Usage(absl::string_view msg) {
  std::fprintf(stderr, "weft certs: %s\n%s", std::string(msg).c_str(), kUsage);
  return 2;
}

// A failed operation; ALREADY_EXISTS says how to replace the file anyway.
// A bad argument found by common/certs.h is still bad usage (2).
int Fail(const absl::Status& s) {
  std::string msg(s.message());
  if (absl::IsAlreadyExists(s)) absl::StrAppend(&msg, " (pass --force to replace it)");
  std::fprintf(stderr, "weft certs: %s\n", msg.c_str());
  return absl::IsInvalidArgument(s) ? 2 : 1;
}

std::string JoinPath(absl::string_view dir, absl::string_view file) {
  while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
  return absl::StrCat(dir, dir == "/" ? "" : "/", file);
}

std::string Utc(absl::Time t) { return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", t, absl::UTCTimeZone()); }

int Init(int argc, char** argv) {
  auto flags = Flags::Parse(argc, argv, 3, {"days", "name"}, {"force"});
  if (!flags.ok()) return Usage(flags.status().message());
  if (flags->args().size() != 1) return Usage("init takes one argument, the cluster directory");
  auto days = flags->GetInt("days", 3650, 1, 36500);
  if (!days.ok()) return Usage(days.status().message());
  const std::string& dir = flags->args()[0];
  const std::string name = flags->Get("name", "weft cluster CA");
  if (absl::Status s = CreateCa(dir, *days, flags->GetBool("force"), name); !s.ok()) return Fail(s);
  std::printf("CA certificate: %s\nCA private key: %s (keep it secret: it can sign any identity)\n",
              JoinPath(dir, "ca.crt").c_str(), JoinPath(dir, "ca.key").c_str());
  return 0;
}

int Issue(int argc, char** argv) {
  auto flags = Flags::Parse(argc, argv, 3, {"name", "hosts", "role", "days"}, {"force"});
  if (!flags.ok()) return Usage(flags.status().message());
  if (flags->args().size() != 1) return Usage("issue takes one argument, the cluster directory");
  if (!flags->Has("name") || flags->Get("name").empty()) {
    return Usage("issue needs --name=NAME: master, /job:NAME/task:N or a user name");
  }
  IssueOptions options;
  options.name = flags->Get("name");
  options.overwrite = flags->GetBool("force");
  auto days = flags->GetInt("days", 365, 1, 36500);
  if (!days.ok()) return Usage(days.status().message());
  options.days = *days;
  if (flags->Has("role")) {
    auto role = ParseRole(flags->Get("role"));
    if (!role.ok()) return Usage(role.status().message());
    options.role = *role;
  } else {
    options.role = IsClusterName(options.name) ? Role::kCluster : Role::kUser;
  }
  if (flags->Has("hosts")) {
    if (flags->Get("hosts").empty()) return Usage("--hosts is empty; leave it out for the default hosts");
    for (absl::string_view h : absl::StrSplit(flags->Get("hosts"), ',')) {
      options.hosts.emplace_back(absl::StripAsciiWhitespace(h));
    }
  }
  const std::string& dir = flags->args()[0];
  absl::StatusOr<std::string> cert = IssueCertificate(dir, options);
  if (!cert.ok()) return Fail(cert.status());
  std::string key = *cert;
  if (absl::EndsWith(key, ".crt")) key.replace(key.size() - 4, 4, ".key");
  std::string expiry;
  absl::StatusOr<std::string> pem = ReadPemFile(*cert, "certificate");
  absl::StatusOr<CertificateInfo> info =
      pem.ok() ? DescribeCertificate(*pem) : absl::StatusOr<CertificateInfo>(pem.status());
  if (info.ok()) expiry = absl::StrCat(", valid until ", Utc(info->not_after));
  std::printf("issued %s (%s)%s\ncertificate: %s\nprivate key: %s\n", options.name.c_str(),
              RoleName(options.role).c_str(), expiry.c_str(), cert->c_str(), key.c_str());
  return 0;
}

int Show(int argc, char** argv) {
  auto flags = Flags::Parse(argc, argv, 3, {}, {});
  if (!flags.ok()) return Usage(flags.status().message());
  if (flags->args().size() != 1) return Usage("show takes one argument, a certificate file");
  const std::string& file = flags->args()[0];
  absl::StatusOr<std::string> pem = ReadPemFile(file, "certificate");
  if (!pem.ok()) return Fail(pem.status());
  absl::StatusOr<CertificateInfo> info = DescribeCertificate(*pem);
  if (!info.ok()) {
    std::fprintf(stderr, "weft certs: certificate %s: %s\n", file.c_str(),
                 std::string(info.status().message()).c_str());
    return 1;
  }
  std::string identity;
  if (absl::StatusOr<PeerIdentity> id = IdentityFromPem(*pem); id.ok()) {
    identity = absl::StrCat(id->name, " (", RoleName(id->role), ")");
  } else if (info->is_ca) {
    identity = "none: a CA certificate";
  } else {
    identity = absl::StrCat("none: ", id.status().message());
  }
  const absl::Time now = absl::Now();
  std::string state;
  if (now < info->not_before) {
    state = "  (not valid yet)";
  } else if (now > info->not_after) {
    state = "  (EXPIRED)";
  } else {
    state = absl::StrCat("  (", absl::ToInt64Hours(info->not_after - now) / 24, " days left)");
  }
  auto line = [](const char* label, const std::string& value) { std::printf("%-14s%s\n", label, value.c_str()); };
  line("file:", file);
  line("identity:", identity);
  line("subject:", info->subject);
  line("issuer:", info->issuer);
  line("serial:", info->serial);
  line("not before:", Utc(info->not_before));
  line("not after:", Utc(info->not_after) + state);
  line("DNS names:", info->dns_names.empty() ? "-" : absl::StrJoin(info->dns_names, ", "));
  line("IP addresses:", info->ip_addresses.empty() ? "-" : absl::StrJoin(info->ip_addresses, ", "));
  return 0;
}

}  // namespace

int RunCertsCommand(int argc, char** argv) {
  if (argc < 3) return Usage("expected a verb: init, issue or show");
  const std::string verb = argv[2];
  if (verb == "init") return Init(argc, argv);
  if (verb == "issue") return Issue(argc, argv);
  if (verb == "show") return Show(argc, argv);
  if (verb == "help" || verb == "--help" || verb == "-h") {
    std::printf("%s", kUsage);
    return 0;
  }
  return Usage(absl::StrCat("unknown verb '", verb, "' (want init, issue or show)"));
}

}  // namespace weft
