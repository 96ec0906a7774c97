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

// The control inputs of `update` (reads it must follow), renamed, on `out`.
void AddControlInputs(const NodeDef& update, const Rename& rename, NodeDef* out);

}  // namespace strategies
}  // namespace master
}  // namespace weft

#endif  // WEFT_MASTER_STRATEGIES_PARAMETER_SERVER_COMMON_H_
