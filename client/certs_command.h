// `weft certs`: the cluster CA and the certificates of weft's mutual TLS
// (common/certs.h), from the command line.
//
//   weft certs init DIR [--days=N] [--name=CA_NAME] [--force]
//       creates DIR (0700) with ca.crt and ca.key (0600); N defaults to 3650.
//   weft certs issue DIR --name=NAME [--hosts=H1,H2,...]
//                        [--role=cluster|user|admin] [--days=N] [--force]
//       signs a new key pair with DIR's CA and writes DIR/<base>.crt and
//       DIR/<base>.key ("master", "/job:worker/task:1" -> worker-1, "alice").
//       The role defaults to cluster for master and task names and to user
//       otherwise; hosts (IP addresses or DNS names, the subjectAltName)
//       default to localhost,127.0.0.1 for cluster identities; N to 365.
//       Prints the paths written.
//   weft certs show FILE
//       prints a certificate's identity (name and role), subject, issuer,
//       serial, validity and subjectAltName entries.
//
// --force replaces existing files; without it nothing is overwritten.
// Exit status: 0 done, 1 failed (a message on stderr names the file and the
// problem), 2 bad usage (`weft certs: <message>` on stderr).
#ifndef WEFT_CLIENT_CERTS_COMMAND_H_
#define WEFT_CLIENT_CERTS_COMMAND_H_

namespace weft {

// argv[0] = "weft", argv[1] = "certs", argv[2] = the verb.
int RunCertsCommand(int argc, char** argv);

}  // namespace weft

#endif  // WEFT_CLIENT_CERTS_COMMAND_H_
