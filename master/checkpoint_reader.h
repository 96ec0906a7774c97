// Reading a job's checkpoint back to its owner (MasterService.ReadJobCheckpoint):
// the Python client's get_weights, save_weights and predict fetch a trained
// model's variables this way, from any machine that can reach the master.
//
// The directory comes from the master's own record of the job (its newest
// checkpoint's parent, under the checkpoint root), never from the request.
// A checkpoint is read only when it is valid (ps/checkpoint_index.h: the
// manifest reads and every shard file matches it), and every shard file is
// read through ps::ReadShard, which checks every length and checksum.
//
// Pages: the variables are listed in manifest order, then file order; a page
// starts at variable `first` and holds variables until it would pass
// `max_bytes` of payload (it always holds at least one), with `next` the
// index of the first variable left (0 when none is).
//
// Thread-safety: a plain function; thread-safe.
#ifndef WEFT_MASTER_CHECKPOINT_READER_H_
#define WEFT_MASTER_CHECKPOINT_READER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/env.h"
#include "proto/master_service.pb.h"

namespace weft {
namespace master {

// Bytes of tensor payload in one ReadJobCheckpoint answer.
inline constexpr uint64_t kCheckpointPageBytes = uint64_t{32} << 20;

// One page of the checkpoint of step `step` under `job_dir` (0: the newest
// valid one). NOT_FOUND naming the directory when it holds no valid
// checkpoint (of that step); INVALID_ARGUMENT for a negative step or `first`
// past the end; the readers' errors (DATA_LOSS naming the file) otherwise.
absl::StatusOr<ReadJobCheckpointResponse> ReadCheckpointPage(Env* env, const std::string& job_dir, int64_t step,
                                                              int64_t first, uint64_t max_bytes = kCheckpointPageBytes);

}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_CHECKPOINT_READER_H_
