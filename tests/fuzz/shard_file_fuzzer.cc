// Fuzzes ReadShard (a checkpoint shard, which a restore reads from a
// directory others may write) through a scratch file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "common/env.h"
#include "ps/shard_file.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static weft::fuzz::ScratchFile file("shard");
  file.Write(data, size);
  auto got = weft::ps::ReadShard(weft::Env::Default(), file.path());
  if (!got.ok()) return 0;
  uint64_t bytes = 0;
  for (const weft::ps::ShardTensor& t : got->tensors) bytes += t.value.TotalBytes();
  if (bytes > size) std::abort();  // payloads lie inside the file
  return 0;
}
