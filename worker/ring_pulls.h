// RecvTensor through shared memory both ways. A task that pulls a tensor
// from a task on its host, with a ring to it and a ring from it, writes the
// RecvTensorRequest into its own ring (GrpcTensorPuller::SetRingRequester,
// collective::WorkerCollectives::SendPullRequestThroughRing) and waits for
// the reply in its mailbox; the serving task's ring reader hands the request
// to ServeRingPull, which answers through its ring to the caller, errors
// included (RecvTensorResponse.error_code). Neither end touches gRPC, so a
// pull costs no RPC and no thread of gRPC's on either side; a pull with no
// rings yet goes over gRPC as before (and its replies offer the rings).
//
// Authentication: the caller is the task its ring was attached under
// (AttachShm over mTLS), never a name in the request, and it may read only
// tensors sent to it (Worker::RecvTensorAsync). Failure: a request the
// serving task cannot write back has nowhere to go; the caller's pull then
// fails when the serving task's ring to it closes (the task exited or broke
// it: the reader fails the replies awaited from it) or with the step.
//
// Thread-safety: ServeRingPull is called on a ring's reader thread and
// never blocks; the reply is written from wherever the tensor becomes
// available.
#ifndef WEFT_WORKER_RING_PULLS_H_
#define WEFT_WORKER_RING_PULLS_H_

#include <string>

#include "worker/collective/collective_types.h"
#include "worker/collective/worker_collectives.h"
#include "worker/worker.h"

namespace weft {
namespace worker {

// Serves the request `request` (a serialized RecvTensorRequest) that task
// `caller` sent through its ring under `key`
// (collective::RecvTensorRequestChunkKey); `worker` and `collectives`
// (borrowed) outlive the rings' readers.
void ServeRingPull(Worker* worker, collective::WorkerCollectives* collectives, const std::string& caller,
                   const collective::ChunkKey& key, const std::string& request);

}  // namespace worker
}  // namespace weft

#endif  // WEFT_WORKER_RING_PULLS_H_
