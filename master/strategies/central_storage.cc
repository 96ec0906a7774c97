// CENTRAL_STORAGE: the sync parameter-server rewrite with the variables on
// one device of the worker (its CPU) and the replicas on its devices; the
// devices come from the planner, so the rewrite is PARAMETER_SERVER's.
#include "master/strategies/strategies.h"
#include "master/strategies/variables.h"

namespace weft {
namespace master {
namespace strategies {

absl::Status RewriteCentralStorage(Rewrite* rw) {
  absl::Status s = ShardLargeVariables(rw);
  if (!s.ok()) return s;
  return RewriteParameterServerSync(rw);
}

}  // namespace strategies
}  // namespace master
}  // namespace weft
