#include "worker/collective/in_process_transport.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace weft {
namespace collective {

class InProcessCollectiveNetwork::Transport final : public CollectiveTransportInterface {
 public:
  explicit Transport(InProcessCollectiveNetwork* network) : network_(network) {}

  void SendAsync(const CollectiveGroup& group, int dst, const ChunkKey& key, SendChunk chunk,
                 StatusCallback done) override {
    if (dst < 0 || dst >= static_cast<int>(network_->ranks_.size()) || network_->ranks_[dst]->down.load()) {
      done(absl::UnavailableError(absl::StrCat(group.Describe(dst), " is unreachable")));
      return;
    }
    // Split the copy in two pieces so receivers see a chunk in several
    // pieces, as gRPC hands them over (odd split: elements straddle).
    auto copy = std::make_shared<std::string>(chunk.data, chunk.size);
    ReceivedChunk received;
    const size_t half = copy->size() / 2 + (copy->size() > 2 ? 1 : 0);
    received.pieces.emplace_back(copy->data(), half);
    if (copy->size() > half) received.pieces.emplace_back(copy->data() + half, copy->size() - half);
    received.owner = std::move(copy);
    chunk.pin = Tensor();
    done(absl::OkStatus());
    // In process the mailbox's quota is the test's to set; a refused chunk
    // is lost as a stream ended by the receiver would lose it.
    network_->ranks_[dst]->mailbox->Deliver(key, std::move(received), group.members[key.src_rank].task).IgnoreError();
  }

 private:
  InProcessCollectiveNetwork* const network_;
};

InProcessCollectiveNetwork::InProcessCollectiveNetwork(int num_ranks) {
  for (int i = 0; i < num_ranks; ++i) {
    auto rank = std::make_unique<Rank>();
    rank->mailbox = std::make_unique<CollectiveMailbox>();
    rank->transport = std::make_unique<Transport>(this);
    ranks_.push_back(std::move(rank));
  }
}

}  // namespace collective
}  // namespace weft
