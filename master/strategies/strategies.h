// The strategy rewrites, one per file, each on a Rewrite (rewrite.h) that
// has Load()ed the one-replica graph and whose options passed ApplyStrategy's
// checks (master/strategy.cc). What each one builds is described in
// master/strategy.h.
//
// Thread-safety: as Rewrite.
#ifndef WEFT_MASTER_STRATEGIES_STRATEGIES_H_
#define WEFT_MASTER_STRATEGIES_STRATEGIES_H_

#include "absl/status/status.h"
#include "master/strategies/rewrite.h"

namespace weft {
namespace master {
namespace strategies {

absl::Status RewriteMirrored(Rewrite* rw);                     // mirrored.cc
absl::Status RewriteMultiWorkerMirrored(Rewrite* rw);          // multi_worker_mirrored.cc
absl::Status RewriteParameterServerSync(Rewrite* rw);          // parameter_server_sync.cc
absl::Status RewriteParameterServerAsync(Rewrite* rw);         // parameter_server_async.cc
absl::Status RewriteParameterServerAccumulated(Rewrite* rw);   // parameter_server_accumulated.cc
absl::Status RewriteCentralStorage(Rewrite* rw);               // central_storage.cc

// MIRRORED through NCCL: asked for (or not refused) and possible, i.e.
// several replicas, each on a GPU of its own (mirrored.cc).
bool LocalNccl(const StrategyOptions& options);

}  // namespace strategies
}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_STRATEGIES_STRATEGIES_H_
