// CollectiveTransportInterface: how the collective engine sends a chunk to
// another rank. Receiving is not part of it: every transport delivers what
// arrives into this process's CollectiveMailbox, where the engine asks for
// it, so the engine knows nothing of gRPC (GrpcCollectiveTransport) or of
// threads standing in for processes (InProcessCollectiveNetwork).
//
// Thread-safety: implementations are thread-safe.
#ifndef WEFT_WORKER_COLLECTIVE_COLLECTIVE_TRANSPORT_H_
#define WEFT_WORKER_COLLECTIVE_COLLECTIVE_TRANSPORT_H_

#include <cstddef>
#include <string>

#include "common/tensor.h"
#include "worker/collective/collective_types.h"

namespace weft {
namespace collective {

// `size` bytes at `data`, inside the buffer of `pin`, which keeps them alive
// for as long as the transport holds the chunk.
struct SendChunk {
  Tensor pin;
  const char* data = nullptr;
  size_t size = 0;
  // Bytes that go before `data` in the same message. Only the shared-memory
  // path takes them (ShmCollectiveTransport::TrySendThroughRing, for
  // RecvTensor replies); every other send refuses a chunk that has them.
  std::string prefix;
};

class CollectiveTransportInterface {
 public:
  virtual ~CollectiveTransportInterface() = default;

  // Sends `chunk` to rank `dst` of `group` under `key`. Chunks to the same
  // rank arrive in the order they were sent. `done` runs once: OK when the
  // transport will read chunk.data no more (the bytes are on their way), or
  // an error naming the peer's task (UNAVAILABLE when it cannot be reached).
  // The sender must not write into the chunk's bytes before `done`.
  virtual void SendAsync(const CollectiveGroup& group, int dst, const ChunkKey& key, SendChunk chunk,
                         StatusCallback done) = 0;
};

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_COLLECTIVE_TRANSPORT_H_
