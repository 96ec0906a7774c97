#include "common/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>

namespace weft {

struct Sha256::Ctx {
  EVP_MD_CTX* md = nullptr;
  ~Ctx() { EVP_MD_CTX_free(md); }
};

namespace {

// Allocation failure inside OpenSSL is out of memory, which the process does
// not survive anyway.
void Init(EVP_MD_CTX* md) {
  if (md == nullptr || EVP_DigestInit_ex(md, EVP_sha256(), nullptr) != 1) std::abort();
}

}  // namespace

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  ctx_->md = EVP_MD_CTX_new();
  Init(ctx_->md);
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::Update(absl::string_view bytes) {
  if (!bytes.empty()) EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size());
}

Sha256::Digest Sha256::Finish() {
  Digest d{};
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_->md, d.data(), &n);
  Init(ctx_->md);
  return d;
}

std::string Sha256::Hex(const Digest& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (uint8_t b : d) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

}  // namespace weft
