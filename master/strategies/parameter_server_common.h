// The parts of the shared-variable strategies (PARAMETER_SERVER in its three
// modes, CENTRAL_STORAGE): variables held once on the variable devices, and
// per replica a copy of everything else.
//
// Thread-safety: as Rewrite.
#ifndef WEFT_MASTER_STRATEGIES_PARAMETER_SERVER_COMMON_H_
#define WEFT_MASTER_STRATEGIES_PARAMETER_SERVER_COMMON_H_

#include <string>

#include "absl/container/flat_hash_set.h"
#include "master/strategies/rewrite.h"

namespace weft {
namespace master {
namespace strategies {

using NameSet = absl::flat_hash_set<std::string>;

// Replica r's names: the shared variables keep theirs.
Rename SharedRename(const NameSet& shared, int r);

// Replica r's copy of every node but the shared variables, the updates and
// the train op, its inputs renamed by `rename`.
void CopyReplicaBody(Rewrite* rw, int r, const NameSet& shared, const Rename& rename);

// An update applied on `device` under `name`: the op and attributes of
// u.node and its variable inputs; the caller adds the gradient and the
// control inputs.
NodeDef* AddUpdate(Rewrite* rw, const std::string& name, const Update& u, const std::string& device);

// The gradient tensor that replica r's update of u (on `var_device`) reads.
// Mostly u.grad as the replica computes it. When u.grad is an EmbeddingGrad
// of the variable itself and the variable lives in another task, the
// replica sends only the rows its ids touched instead of the whole table:
// EmbeddingGradRows (on the replica task's CPU) gives the distinct ids and
// their summed rows, and ScatterRows beside the variable makes them the same
// dense gradient, bit for bit (graph/ops/embedding_ops.cc). A gradient that
// passed through clipping, loss scaling, gradient accumulation or a table
// used twice is no longer an EmbeddingGrad, and travels dense.
std::string ReplicaGradient(Rewrite* rw, const Update& u, int r, const Rename& rename, const std::string& var_device);

// The control inputs of u.node, the reads of its variable that the update
// must follow, as replica r's on `out` (the update on `var_device`), but
// for those the update follows anyway:
//   - a read the replica's gradient depends on (the update waits for it);
//   - on a replica in another task than the variable, every read: there all
//     of them read the one copy that the variable's transfer to the replica
//     made (graph/partition.cc gives a tensor one _Recv per device), and
//     that transfer precedes the gradient whenever any read does.
// Each edge kept from a replica's task costs a transfer per step, so a
// training graph on a ps keeps none.
void AddControlInputs(const Rewrite& rw, const Update& u, int r, const std::string& var_device,
                      const Rename& rename, NodeDef* out);

}  // namespace strategies
}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_STRATEGIES_PARAMETER_SERVER_COMMON_H_
