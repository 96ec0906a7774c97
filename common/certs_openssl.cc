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

// ---- OpenSSL objects ---------------------------------------------------------

X509Ptr ParseCertificate(absl::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return nullptr;
  return X509Ptr(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

// An encrypted key fails rather than prompting on the terminal.
int NoPassword(char*, int, int, void*) { return -1; }

PkeyPtr ParsePrivateKey(absl::string_view pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (bio == nullptr) return nullptr;
  return PkeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassword, nullptr));
}

std::string BioContents(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

absl::StatusOr<std::string> CertificatePem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || PEM_write_bio_X509(bio.get(), cert) != 1) {
    return absl::InternalError(absl::StrCat("cannot PEM-encode a certificate", SslErrors()));
  }
  return BioContents(bio.get());
}

// PKCS#8, unencrypted. The BIO is secure memory, wiped when freed.
absl::StatusOr<std::string> PrivateKeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_secmem()));
  if (bio == nullptr || PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return absl::InternalError(absl::StrCat("cannot PEM-encode a private key", SslErrors()));
  }
  return BioContents(bio.get());
}

void Wipe(std::string* secret) {
  if (!secret->empty()) OPENSSL_cleanse(&(*secret)[0], secret->size());
}

// Version 3, a random serial, subject O (when not empty) and CN, validity,
// public key. The caller sets the issuer and extensions and signs it.
absl::StatusOr<X509Ptr> NewCertificate(EVP_PKEY* key, const std::string& cn, const char* org, int days) {
  X509Ptr cert(X509_new());
  unsigned char serial[16];
  bool zero = true;
  while (zero) {
    if (RAND_bytes(serial, sizeof(serial)) != 1) return absl::InternalError(absl::StrCat("RAND_bytes", SslErrors()));
    for (unsigned char b : serial) zero = zero && b == 0;
  }
  BignumPtr bn(BN_bin2bn(serial, sizeof(serial), nullptr));
  X509_NAME* subject = cert == nullptr ? nullptr : X509_get_subject_name(cert.get());
  auto add = [subject](const char* field, const char* value) {
    return X509_NAME_add_entry_by_txt(subject, field, MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(value), -1,
                                      -1, 0) == 1;
  };
  if (cert == nullptr || bn == nullptr || X509_set_version(cert.get(), X509_VERSION_3) != 1 ||
      BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get())) == nullptr ||
      (org != nullptr && !add("O", org)) || !add("CN", cn.c_str()) ||
      X509_gmtime_adj(X509_getm_notBefore(cert.get()), -kBackdateSeconds) == nullptr ||
      X509_time_adj_ex(X509_getm_notAfter(cert.get()), days, 0, nullptr) == nullptr ||
      X509_set_pubkey(cert.get(), key) != 1) {
    return absl::InternalError(absl::StrCat("cannot build the certificate for ", Quote(cn), SslErrors()));
  }
  return cert;
}

absl::Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const char* value) {
  ExtensionPtr ext(X509V3_EXT_conf_nid(nullptr, ctx, nid, value));
  if (ext == nullptr || X509_add_ext(cert, ext.get(), -1) != 1) {
    return absl::InternalError(absl::StrCat("cannot add extension ", OBJ_nid2sn(nid), "=", value, SslErrors()));
  }
  return absl::OkStatus();
}

// subjectAltName from checked hosts: IP entries for addresses, DNS otherwise.
absl::Status AddSubjectAltNames(X509* cert, const std::vector<std::string>& hosts) {
  GeneralNamesPtr names(sk_GENERAL_NAME_new_null());
  if (names == nullptr) return absl::InternalError(absl::StrCat("cannot allocate subjectAltName", SslErrors()));
  for (const std::string& host : hosts) {
    GeneralNamePtr name(GENERAL_NAME_new());
    if (name == nullptr) return absl::InternalError(absl::StrCat("cannot allocate a name", SslErrors()));
    if (IsIpAddress(host)) {
      ASN1_OCTET_STRING* ip = a2i_IPADDRESS(host.c_str());
      if (ip == nullptr) return absl::InternalError(absl::StrCat("cannot encode IP ", host, SslErrors()));
      GENERAL_NAME_set0_value(name.get(), GEN_IPADD, ip);
    } else {
      Ia5StringPtr dns(ASN1_IA5STRING_new());
      if (dns == nullptr || ASN1_STRING_set(dns.get(), host.data(), static_cast<int>(host.size())) != 1) {
        return absl::InternalError(absl::StrCat("cannot encode DNS name ", host, SslErrors()));
      }
      GENERAL_NAME_set0_value(name.get(), GEN_DNS, dns.release());
    }
    if (sk_GENERAL_NAME_push(names.get(), name.get()) == 0) {
      return absl::InternalError(absl::StrCat("cannot add ", host, " to subjectAltName", SslErrors()));
    }
    name.release();  // owned by `names` now
  }
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) != 1) {
    return absl::InternalError(absl::StrCat("cannot add subjectAltName", SslErrors()));
  }
  return absl::OkStatus();
}

absl::Status Sign(X509* cert, EVP_PKEY* key) {
  if (X509_sign(cert, key, EVP_sha256()) <= 0) {
    return absl::InternalError(absl::StrCat("cannot sign the certificate", SslErrors()));
  }
  return absl::OkStatus();
}

absl::StatusOr<PkeyPtr> NewKey() {
  PkeyPtr key(EVP_EC_gen("prime256v1"));
  if (key == nullptr) return absl::InternalError(absl::StrCat("cannot generate an EC P-256 key", SslErrors()));
  return key;
}

// Writes the key (0600) then the certificate (0644); without `overwrite`, a
// key written for a certificate that could not be is removed again.
absl::Status WritePair(const std::string& dir, const std::string& cert_path, X509* cert, const std::string& key_path,
                       EVP_PKEY* key, bool overwrite) {
  ASSIGN_OR_RETURN(std::string cert_pem, CertificatePem(cert));
  ASSIGN_OR_RETURN(std::string key_pem, PrivateKeyPem(key));
  absl::Status s = WriteFileAtomically(dir, key_path, key_pem, 0600, overwrite);
  Wipe(&key_pem);
  RETURN_IF_ERROR(s);
  s = WriteFileAtomically(dir, cert_path, cert_pem, 0644, overwrite);
  if (!s.ok() && !overwrite) unlink(key_path.c_str());
  return s;
}

absl::StatusOr<CaPair> LoadCa(const std::string& dir) {
  const std::string cert_path = JoinPath(dir, "ca.crt");
  const std::string key_path = JoinPath(dir, "ca.key");
  absl::StatusOr<std::string> cert_pem = ReadPemFile(cert_path, "CA certificate");
  if (absl::IsNotFound(cert_pem.status())) {
    return absl::NotFoundError(absl::StrCat("no CA in ", dir, " (create one with `weft certs init ", dir,
                                            "`): ", cert_pem.status().message()));
  }
  if (!cert_pem.ok()) return cert_pem.status();
  ASSIGN_OR_RETURN(std::string key_pem, ReadPemFile(key_path, "CA private key"));
  CaPair ca{ParseCertificate(*cert_pem), ParsePrivateKey(key_pem)};
  Wipe(&key_pem);
  if (ca.cert == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("CA certificate ", cert_path, " is not a PEM certificate", SslErrors()));
  }
  if (ca.key == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("CA private key ", key_path, " is not an unencrypted PEM private key", SslErrors()));
  }
  if (X509_check_ca(ca.cert.get()) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(cert_path, " is not a CA certificate (no CA:TRUE)"));
  }
  if (X509_check_private_key(ca.cert.get(), ca.key.get()) != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("CA private key ", key_path, " does not match CA certificate ", cert_path, SslErrors()));
  }
  return ca;
}

// One subject entry as UTF-8: UNAUTHENTICATED when it is missing, repeated
// or not text.
absl::StatusOr<std::string> OneEntry(X509_NAME* name, int nid, absl::string_view label) {
  const int index = X509_NAME_get_index_by_NID(name, nid, -1);
  if (index < 0) return absl::UnauthenticatedError(absl::StrCat("the certificate's subject has no ", label));
  if (X509_NAME_get_index_by_NID(name, nid, index) >= 0) {
    return absl::UnauthenticatedError(absl::StrCat("the certificate's subject has more than one ", label));
  }
  unsigned char* utf8 = nullptr;
  const int n = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, index)));
  std::unique_ptr<unsigned char, OpensslFree> owned(utf8);
  if (n < 0) return absl::UnauthenticatedError(absl::StrCat("the certificate's subject ", label, " is not text"));
  std::string text(reinterpret_cast<char*>(utf8), static_cast<size_t>(n));
  if (text.find('\0') != std::string::npos) {
    return absl::UnauthenticatedError(absl::StrCat("the certificate's subject ", label, " contains a NUL byte"));
  }
  return text;
}

absl::StatusOr<PeerIdentity> IdentityOf(X509* cert) {
  X509_NAME* subject = X509_get_subject_name(cert);
  ASSIGN_OR_RETURN(std::string cn, OneEntry(subject, NID_commonName, "CN"));
  absl::StatusOr<std::string> org = OneEntry(subject, NID_organizationName, "O");
  if (!org.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat(org.status().message(), " (a weft certificate has O=weft:cluster, weft:user or weft:admin)"));
  }
  PeerIdentity id;
  id.name = cn;
  if (*org == kOrgCluster) {
    id.role = Role::kCluster;
    if (!IsClusterName(cn)) {
      return absl::UnauthenticatedError(
          absl::StrCat("the CN of a cluster certificate must be master or "
                       "/job:NAME/task:N, not ",
                       Quote(cn)));
    }
    return id;
  }
  if (*org == kOrgUser) {
    id.role = Role::kUser;
  } else if (*org == kOrgAdmin) {
    id.role = Role::kAdmin;
  } else {
    return absl::UnauthenticatedError(
        absl::StrCat("the certificate's subject O ", Quote(*org), " is not weft:cluster, weft:user or weft:admin"));
  }
  if (!IsUserName(cn)) {
    return absl::UnauthenticatedError(
        absl::StrCat("the CN of a ", RoleName(id.role), " certificate, ", Quote(cn), ", is not a valid user name"));
  }
  return id;
}

absl::Time TimeOf(const ASN1_TIME* t) {
  struct tm tm;
  std::memset(&tm, 0, sizeof(tm));
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return absl::InfinitePast();
  return absl::FromTimeT(timegm(&tm));
}

std::string TimeText(const ASN1_TIME* t) {
  return absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", TimeOf(t), absl::UTCTimeZone());
}

std::string NameText(const X509_NAME* name) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253) < 0) return "";
  return BioContents(bio.get());
}

// Why X509_verify_cert refused `cert_file`, in words.
absl::Status VerifyError(X509_STORE_CTX* ctx, const std::string& ca_file, const std::string& cert_file) {
  const int err = X509_STORE_CTX_get_error(ctx);
  const bool leaf = X509_STORE_CTX_get_error_depth(ctx) == 0;
  const std::string which = leaf ? absl::StrCat("certificate ", cert_file) : absl::StrCat("CA certificate ", ca_file);
  X509* at = X509_STORE_CTX_get_current_cert(ctx);
  switch (err) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
      return absl::FailedPreconditionError(absl::StrCat("certificate ", cert_file, " was not signed by the CA in ",
                                                        ca_file, " (", X509_verify_cert_error_string(err), ")"));
    case X509_V_ERR_CERT_HAS_EXPIRED:
      return absl::FailedPreconditionError(absl::StrCat(
          which, " expired at ", at == nullptr ? "?" : TimeText(X509_get0_notAfter(at)), "; issue a new one"));
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return absl::FailedPreconditionError(absl::StrCat(which, " is not valid before ",
                                                        at == nullptr ? "?" : TimeText(X509_get0_notBefore(at)),
                                                        " (is this machine's clock right?)"));
    default:
      return absl::FailedPreconditionError(absl::StrCat("certificate ", cert_file,
                                                        " does not verify against the CA in ", ca_file, ": ",
                                                        X509_verify_cert_error_string(err)));
  }
}

}  // namespace certs_internal
}  // namespace weft
