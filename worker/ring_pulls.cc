#include "worker/ring_pulls.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "proto/worker_service.pb.h"
#include "worker/grpc_tensor_coding.h"

namespace weft {
namespace worker {
namespace {

// Writes a reply (`header` and `value`'s bytes) for the pull through the
// ring to `caller`.
void Reply(collective::WorkerCollectives* collectives, const std::string& caller, int64_t step_id, uint64_t pull_id,
           const Tensor& value, std::string header) {
  StatusCallback written = [caller, step_id](const absl::Status& s) {
    if (!s.ok()) {
      Logger("worker")->warn("a RecvTensor reply of step {} to task {} was lost with its ring: {}", step_id, caller,
                             std::string(s.message()));
    }
  };
  if (!collectives->SendTensorThroughRing(caller, step_id, pull_id, value, std::move(header), written)) {
    Logger("worker")->warn("a RecvTensor reply of step {} to task {} has no shared-memory ring to take", step_id,
                           caller);
  }
}

}  // namespace

void ServeRingPull(Worker* worker, collective::WorkerCollectives* collectives, const std::string& caller,
                   const collective::ChunkKey& key, const std::string& request) {
  const int64_t step_id = key.step_id;
  const uint64_t pull_id = static_cast<uint64_t>(key.instance_key);
  RecvTensorRequest parsed;
  absl::Status bad;
  if (!parsed.ParseFromString(request)) {
    bad = absl::InvalidArgumentError("a RecvTensorRequest through shared memory does not parse");
  } else if (parsed.step_id() != step_id || parsed.shm_pull_id() != pull_id) {
    bad = absl::InvalidArgumentError(absl::StrCat("a RecvTensorRequest for step ", parsed.step_id(), ", pull ",
                                                  parsed.shm_pull_id(), " came under step ", step_id, ", pull ",
                                                  pull_id));
  }
  if (!bad.ok()) return Reply(collectives, caller, step_id, pull_id, Tensor(), EncodeRecvTensorError(bad));
  worker->RecvTensorAsync(&parsed, caller, [collectives, caller, step_id, pull_id](const absl::Status& s,
                                                                                   const Tensor& value, bool is_dead) {
    if (s.ok() && !value.on_host()) {
      return Reply(collectives, caller, step_id, pull_id, Tensor(),
                   EncodeRecvTensorError(absl::InternalError("a RecvTensor value in device memory")));
    }
    if (!s.ok()) return Reply(collectives, caller, step_id, pull_id, Tensor(), EncodeRecvTensorError(s));
    Reply(collectives, caller, step_id, pull_id, value, EncodeRecvTensorHeader(value, is_dead));
  });
}

}  // namespace worker
}  // namespace weft
