// Where shared variables go (the parameter-server and central-storage
// strategies): spreading them over the variable devices by bytes, and
// splitting the ones too large for one device into row shards.
//
// Thread-safety: as Rewrite.
#ifndef WEFT_MASTER_STRATEGIES_VARIABLES_H_
#define WEFT_MASTER_STRATEGIES_VARIABLES_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "master/strategies/rewrite.h"

namespace weft {
namespace master {
namespace strategies {

// Variable -> one of options.variable_devices. The variables one update
// writes stay together; the groups are placed largest first, each onto the
// least-loaded device (by bytes), ties to the first device.
std::map<std::string, std::string> SpreadVariables(const Rewrite& rw);

// Splits every update whose variable exceeds options.max_shard_bytes into
// one update per row shard: shard variables (the variable's and its slots'
// rows; scalar slots copied), SliceRows of the gradient per shard, and a
// ConcatRows ("var/stacked") that every other reader of the variable reads
// instead. Replaces rw->in_def and records rw->sharded. No-op when
// max_shard_bytes <= 0 or nothing is large enough.
absl::Status ShardLargeVariables(Rewrite* rw);

}  // namespace strategies
}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_STRATEGIES_VARIABLES_H_
