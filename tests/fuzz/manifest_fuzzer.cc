// Fuzzes ReadManifest through a scratch checkpoint directory holding only
// the MANIFEST. A manifest that reads must also pass ValidateManifest.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "common/env.h"
#include "ps/manifest.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static weft::fuzz::ScratchFile file(weft::ps::kManifestFileName);
  file.Write(data, size);
  auto got = weft::ps::ReadManifest(weft::Env::Default(), file.dir());
  if (got.ok() && !weft::ps::ValidateManifest(*got).ok()) std::abort();
  return 0;
}
