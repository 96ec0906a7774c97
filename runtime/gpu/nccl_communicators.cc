#include "runtime/gpu/nccl_communicators.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

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
  // (group_key, ordinals in rank order) -> one communicator per rank.
  std::map<std::pair<int64_t, std::vector<int>>, std::vector<ncclComm_t>> local ABSL_GUARDED_BY(mu);
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

absl::StatusOr<std::vector<ncclComm_t>> GetLocalNcclCommunicators(const std::vector<GpuDevice*>& gpus,
                                                                  int64_t group_key) {
  std::vector<int> ordinals;
  for (GpuDevice* g : gpus) {
    if (std::find(ordinals.begin(), ordinals.end(), g->ordinal()) != ordinals.end()) {
      return absl::InvalidArgumentError(absl::StrCat("an in-process NCCL group needs a different GPU per rank; GPU ",
                                                     g->ordinal(), " (", g->name(), ") appears twice"));
    }
    ordinals.push_back(g->ordinal());
  }
  if (ordinals.empty()) return absl::InvalidArgumentError("an in-process NCCL group of no GPUs");
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  const auto key = std::make_pair(group_key, ordinals);
  auto it = r.local.find(key);
  if (it != r.local.end()) return it->second;
  std::vector<ncclComm_t> comms(ordinals.size(), nullptr);
  WEFT_NCCL_RETURN_IF_ERROR(ncclCommInitAll(comms.data(), static_cast<int>(ordinals.size()), ordinals.data()));
  r.local.emplace(key, comms);
  return comms;
}

int NumNcclCommunicators() {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  int n = static_cast<int>(r.comms.size());
  for (const auto& [key, comms] : r.local) n += static_cast<int>(comms.size());
  return n;
}

}  // namespace gpu
}  // namespace weft
