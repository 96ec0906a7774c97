// Sha256: an incremental SHA-256 (OpenSSL's EVP interface), for checking
// files that arrive in pieces (uploaded datasets) without holding them.
//
// Thread-safety: not thread-safe; one owner feeds it.
#ifndef WEFT_COMMON_SHA256_H_
#define WEFT_COMMON_SHA256_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace weft {

class Sha256 {
 public:
  using Digest = std::array<uint8_t, 32>;

  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void Update(absl::string_view bytes);
  // The digest of everything fed so far; the object then starts over.
  Digest Finish();

  // Lowercase hex, 64 characters.
  static std::string Hex(const Digest& d);

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

}  // namespace weft

#endif  // WEFT_COMMON_SHA256_H_
