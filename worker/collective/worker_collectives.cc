#include "worker/collective/worker_collectives.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/grpc_channel_cache.h"
#include "worker/collective/fusion.h"

namespace weft {
namespace collective {

namespace {
GrpcCollectiveTransport::Options TransportOptions(const std::shared_ptr<const TransportSecurity>& security) {
  GrpcCollectiveTransport::Options o;
  if (security != nullptr) o.credentials = security->ChannelCredentials();
  return o;
}
}  // namespace

WorkerCollectives::WorkerCollectives(std::string task, ClusterDef cluster, Options options)
    : task_(std::move(task)),
      timeout_(options.timeout),
      cluster_(std::move(cluster)),
      mailbox_(/*check_senders=*/options.security != nullptr && !options.security->insecure(),
               options.max_pending_bytes),
      service_(&mailbox_, options.security),
      network_(std::make_unique<GrpcCollectiveTransport>(TransportOptions(options.security))),
      offerer_(options.security != nullptr ? options.security->ChannelCredentials() : nullptr),
      shared_memory_(options.shared_memory) {
  transport_ = network_.get();
  if (options.sockets) {
    start_status_ = StartSockets(options);
    if (socket_ != nullptr) transport_ = socket_.get();
  }
  if (shared_memory_) {
    ShmCollectiveTransport::Options o;
    o.offerer = &offerer_;
    absl::MutexLock lock(&shm_mu_);
    shm_ = std::make_unique<ShmCollectiveTransport>(transport_, &mailbox_, o);
    transport_ = shm_.get();
    service_.SetAttachHandler(
        [this](const std::string& caller, const AttachShmRequest& request) -> absl::StatusOr<AttachShmResponse> {
          absl::ReaderMutexLock lock(&shm_mu_);
          if (shm_ == nullptr) return absl::UnavailableError(absl::StrCat("task ", task_, " is shutting down"));
          return shm_->Attach(caller, request);
        });
  }
  // Each chunk is summed on the gRPC thread that received it (no compute
  // pool): a pool hand-off cost a thread wake-up per chunk and round
  // (BENCHMARKS.md, the all-reduce section).
  executor_ = std::make_unique<CollectiveExecutor>(transport_, &mailbox_, CollectiveExecutor::Options{});
}

absl::Status WorkerCollectives::StartSockets(const Options& options) {
  SocketCollectiveTransport::Options o;
  if (options.security != nullptr && !options.security->insecure()) {
    absl::StatusOr<std::shared_ptr<const TlsSocketContext>> tls = TlsSocketContext::FromFiles(options.security->files());
    if (!tls.ok()) return tls.status();
    o.tls = *std::move(tls);
  }
  o.listen_host = options.socket_host;
  o.listen_port = options.socket_port;
  o.endpoints = &offerer_;
  absl::StatusOr<std::unique_ptr<SocketCollectiveTransport>> made =
      SocketCollectiveTransport::Create(network_.get(), &mailbox_, std::move(o));
  if (!made.ok()) {
    return absl::Status(made.status().code(), absl::StrCat("task ", task_, ": collective sockets (--collective_port=",
                                                           options.socket_port, "): ", made.status().message()));
  }
  socket_ = *std::move(made);
  service_.SetSocketPort(socket_->port());
  return absl::OkStatus();
}

WorkerCollectives::~WorkerCollectives() { Close(absl::CancelledError("collectives destroyed")); }

void WorkerCollectives::Close(const absl::Status& status) {
  std::unique_ptr<CollectiveExecutor> executor;
  {
    absl::MutexLock lock(&mu_);
    executor = std::move(executor_);
  }
  if (executor == nullptr) return;
  executor->Abort(status);
  executor.reset();  // joins its threads
  // Out from under the lock first, then closed: closing joins the rings'
  // readers, and a reader serving a RecvTensor request (worker/ring_pulls.h)
  // takes the lock to answer; it finds no transport and gives up instead.
  std::unique_ptr<ShmCollectiveTransport> shm;
  {
    absl::MutexLock lock(&shm_mu_);
    shm = std::move(shm_);
  }
  shm.reset();  // closes the rings (their readers stop delivering)
  socket_.reset();  // shuts the sockets and joins their threads
  network_.reset();  // ends the streams to peers
}

void WorkerCollectives::AbortStep(int64_t step_id, const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  if (executor_ != nullptr) executor_->AbortStep(step_id, status);
}

void WorkerCollectives::CleanupStep(int64_t step_id) {
  absl::MutexLock lock(&mu_);
  if (executor_ != nullptr) executor_->CleanupStep(step_id);
}

std::vector<CollectiveWait> WorkerCollectives::Pending() const {
  absl::MutexLock lock(&mu_);
  return executor_ != nullptr ? executor_->Pending() : std::vector<CollectiveWait>();
}

bool WorkerCollectives::SendTensorThroughRing(const std::string& task, int64_t step_id, uint64_t pull_id,
                                              const Tensor& value, std::string header, StatusCallback& done) {
  if (value.IsInitialized() && !value.on_host()) return false;
  SendChunk chunk;
  chunk.pin = value;
  chunk.data = value.IsInitialized() ? static_cast<const char*>(value.raw_data()) : nullptr;
  chunk.size = value.IsInitialized() ? value.TotalBytes() : 0;
  chunk.prefix = std::move(header);
  return SendThroughRing(task, RecvTensorChunkKey(pull_id, step_id), std::move(chunk), /*needs_ring_back=*/false,
                         done);
}

bool WorkerCollectives::SendPullRequestThroughRing(const std::string& task, int64_t step_id, uint64_t pull_id,
                                                   std::string request, StatusCallback& done) {
  SendChunk chunk;
  chunk.prefix = std::move(request);
  return SendThroughRing(task, RecvTensorRequestChunkKey(pull_id, step_id), std::move(chunk),
                         /*needs_ring_back=*/true, done);
}

bool WorkerCollectives::SendThroughRing(const std::string& task, const ChunkKey& key, SendChunk chunk,
                                        bool needs_ring_back, StatusCallback& done) {
  absl::StatusOr<std::string> address;
  {
    absl::MutexLock lock(&mu_);
    address = worker::TaskAddress(cluster_, task);
  }
  if (!address.ok()) return false;
  absl::ReaderMutexLock lock(&shm_mu_);
  if (shm_ == nullptr || (needs_ring_back && !shm_->HasRingFrom(task))) return false;
  return shm_->TrySendThroughRing(*address, task, key, std::move(chunk), done);
}

void WorkerCollectives::SetPullRequestHandler(ShmCollectiveTransport::RequestHandler handler) {
  absl::MutexLock lock(&shm_mu_);
  if (shm_ != nullptr) shm_->SetRequestHandler(std::move(handler));
}

void WorkerCollectives::SetCluster(ClusterDef cluster) {
  absl::MutexLock lock(&mu_);
  cluster_ = std::move(cluster);
}

void WorkerCollectives::AllReduceAsync(const AllReduceArgs& args, std::vector<Tensor*> tensors,
                                       std::function<void(const absl::Status&)> done) {
  CollectiveParams params;
  params.group.group_key = args.group_key;
  params.group.rank = -1;
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < args.tasks.size(); ++i) {
      auto address = worker::TaskAddress(cluster_, args.tasks[i]);
      if (!address.ok()) return done(address.status());
      params.group.members.push_back(CollectiveMember{args.tasks[i], *address});
      if (args.tasks[i] == task_) params.group.rank = static_cast<int>(i);
    }
  }
  if (params.group.rank < 0) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("all-reduce group of ", args.tasks.size(), " task(s) does not include this task, ", task_)));
  }
  params.instance_key = args.instance_key;
  params.step_id = args.step_id;
  params.timeout = timeout_;
  // The graph already fused the bucket: one collective for all its tensors.
  CollectiveExecutor* executor;
  {
    absl::MutexLock lock(&mu_);
    executor = executor_.get();
  }
  if (executor == nullptr) return done(absl::UnavailableError(absl::StrCat("task ", task_, " is shutting down")));
  FusedAllReduceAsync(executor, params, std::move(tensors), std::numeric_limits<size_t>::max(), std::move(done));
}

}  // namespace collective
}  // namespace weft
