// NCCL communicators for the GPUs of this process, and NCCL unique ids.
//
// A group of all-reduce ranks shares one communicator per GPU, created on
// first use and kept for the life of the process (NCCL's setup costs
// milliseconds to seconds; a step must not pay it). A one-rank group needs
// nothing from outside (ncclCommInitAll). A group across processes needs
// the same NCCL unique id on every rank: whoever plans the collective (the
// master, for MULTI_WORKER_MIRRORED) makes one with NewNcclUniqueId and hands
// it to every rank, e.g. as the CollectiveAllReduce node's `nccl_unique_id`
// attribute (hex). The process that made the id hosts NCCL's bootstrap root,
// so it must live until every rank has joined. A group over several GPUs of
// this process (MIRRORED) needs no id either: its communicators are made
// together (GetLocalNcclCommunicators).
//
// Thread-safety: thread-safe.
#ifndef WEFT_RUNTIME_GPU_NCCL_COMMUNICATORS_H_
#define WEFT_RUNTIME_GPU_NCCL_COMMUNICATORS_H_

#include <nccl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace weft {
namespace gpu {

class GpuDevice;

// A fresh NCCL unique id as 2 * NCCL_UNIQUE_ID_BYTES lower-case hex digits.
absl::StatusOr<std::string> NewNcclUniqueId();

// The communicator of rank `rank` of `size` in group `group_key` on `gpu`.
// `unique_id_hex` is required when size > 1 (INVALID_ARGUMENT otherwise).
absl::StatusOr<ncclComm_t> GetNcclCommunicator(GpuDevice* gpu, int64_t group_key, int rank, int size,
                                               const std::string& unique_id_hex);

// The communicators of an in-process group over `gpus` (rank r on gpus[r],
// each a different GPU), made together by ncclCommInitAll on first use. The
// ranks' operations must then be issued together, in one NCCL group
// (runtime/local_gather.h). INVALID_ARGUMENT when two ranks share a GPU
// (NCCL refuses that).
absl::StatusOr<std::vector<ncclComm_t>> GetLocalNcclCommunicators(const std::vector<GpuDevice*>& gpus,
                                                                  int64_t group_key);

// Communicators created so far (for tests).
int NumNcclCommunicators();

}  // namespace gpu
}  // namespace weft

#endif  // WEFT_RUNTIME_GPU_NCCL_COMMUNICATORS_H_
