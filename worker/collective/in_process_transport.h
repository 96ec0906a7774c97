// InProcessCollectiveNetwork: N ranks in one process, for tests. Rank i has
// its own CollectiveMailbox; a send copies the chunk's bytes and delivers the
// copy to the destination's mailbox on the sender's thread. A rank marked
// down (SetDown) fails every send to it with UNAVAILABLE naming its task,
// like a peer whose server is gone.
//
// Thread-safety: thread-safe. The network outlives the transports it hands
// out and every collective running over them.
#ifndef WEFT_WORKER_COLLECTIVE_IN_PROCESS_TRANSPORT_H_
#define WEFT_WORKER_COLLECTIVE_IN_PROCESS_TRANSPORT_H_

#include <atomic>
#include <memory>
#include <vector>

#include "worker/collective/collective_mailbox.h"
#include "worker/collective/collective_transport.h"

namespace weft {
namespace collective {

class InProcessCollectiveNetwork {
 public:
  explicit InProcessCollectiveNetwork(int num_ranks);

  CollectiveMailbox* mailbox(int rank) { return ranks_[rank]->mailbox.get(); }
  CollectiveTransportInterface* transport(int rank) { return ranks_[rank]->transport.get(); }
  void SetDown(int rank, bool down) { ranks_[rank]->down.store(down); }

 private:
  class Transport;
  struct Rank {
    std::unique_ptr<CollectiveMailbox> mailbox;
    std::unique_ptr<CollectiveTransportInterface> transport;
    std::atomic<bool> down{false};
  };
  std::vector<std::unique_ptr<Rank>> ranks_;
};

}  // namespace collective
}  // namespace weft

#endif  // WEFT_WORKER_COLLECTIVE_IN_PROCESS_TRANSPORT_H_
