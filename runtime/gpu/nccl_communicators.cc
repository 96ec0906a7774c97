#include "runtime/gpu/nccl_communicators.h"

#include <cstring>
#include <map>
#include <tuple>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "runtime/gpu/gpu_device.h"

namespace weft {
namespace gpu {
namespace {

struct Registry {
  absl::Mutex mu;
  // (ordinal, group_key, rank, size, id) -> communicator; never destroyed
  // (ncclCommDestroy at process exit can wait on peers that are gone).
  std::map<std::tuple<int, int64_t, int, int, std::string>, ncclComm_t> comms ABSL_GUARDED_BY(mu);
};

Registry& TheRegistry() {
  static Registry* const r = new Registry();
  return *r;
}

}  // namespace

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  WEFT_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  return absl::BytesToHexString(absl::string_view(id.internal, sizeof(id.internal)));
}

absl::StatusOr<ncclComm_t> GetNcclCommunicator(GpuDevice* gpu, int64_t group_key, int rank, int size,
                                               const std::string& unique_id_hex) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL rank ", rank, " of ", size));
  }
  if (size > 1 && unique_id_hex.size() != 2 * sizeof(ncclUniqueId::internal)) {
    return absl::InvalidArgumentError(
        absl::StrCat("an NCCL group of ", size, " ranks needs the group's unique id (", 2 * sizeof(ncclUniqueId::internal),
                     " hex digits), got ", unique_id_hex.size(), " characters"));
  }
  Registry& r = TheRegistry();
  // Held while creating: two kernels of one group must not both create it.
  absl::MutexLock lock(&r.mu);
  const auto key = std::make_tuple(gpu->ordinal(), group_key, rank, size, unique_id_hex);
  auto it = r.comms.find(key);
  if (it != r.comms.end()) return it->second;
  RETURN_IF_ERROR(gpu->MakeCurrent());
  ncclComm_t comm = nullptr;
  if (size == 1) {
    const int ordinal = gpu->ordinal();
    WEFT_NCCL_RETURN_IF_ERROR(ncclCommInitAll(&comm, 1, &ordinal));
  } else {
    ncclUniqueId id;
    const std::string bytes = absl::HexStringToBytes(unique_id_hex);
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
    WEFT_NCCL_RETURN_IF_ERROR(ncclCommInitRank(&comm, size, id, rank));
  }
  r.comms.emplace(key, comm);
  return comm;
}

int NumNcclCommunicators() {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  return static_cast<int>(r.comms.size());
}

}  // namespace gpu
}  // namespace weft
