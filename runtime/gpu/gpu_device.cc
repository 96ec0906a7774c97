#include "runtime/gpu/gpu_device.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "runtime/gpu/gpu_allocator.h"

namespace weft {
namespace gpu {

absl::Status CudaStatus(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return absl::OkStatus();
  const std::string msg = absl::StrCat(call, ": ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")");
  switch (e) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorDevicesUnavailable:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status CublasStatus(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg = absl::StrCat(call, ": ", cublasGetStatusString(s), " (", cublasGetStatusName(s), ")");
  if (s == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (s == CUBLAS_STATUS_NOT_INITIALIZED) return absl::UnavailableError(msg);
  if (s == CUBLAS_STATUS_INVALID_VALUE) return absl::InvalidArgumentError(msg);
  return absl::InternalError(msg);
}

absl::Status CudnnStatus(cudnnStatus_t s, const char* call) {
  if (s == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  const std::string msg = absl::StrCat(call, ": ", cudnnGetErrorString(s));
  if (s == CUDNN_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(msg);
  if (s == CUDNN_STATUS_NOT_INITIALIZED) return absl::UnavailableError(msg);
  if (s == CUDNN_STATUS_BAD_PARAM) return absl::InvalidArgumentError(msg);
  return absl::InternalError(msg);
}

absl::Status NcclStatus(ncclResult_t r, const char* call) {
  if (r == ncclSuccess) return absl::OkStatus();
  const std::string msg = absl::StrCat(call, ": ", ncclGetErrorString(r));
  if (r == ncclSystemError || r == ncclRemoteError) return absl::UnavailableError(msg);
  if (r == ncclInvalidArgument || r == ncclInvalidUsage) return absl::InvalidArgumentError(msg);
  return absl::InternalError(msg);
}

GpuDevice::GpuDevice(std::string name, int ordinal) : Device(std::move(name), "GPU", 1), ordinal_(ordinal) {}

absl::StatusOr<std::unique_ptr<GpuDevice>> GpuDevice::Create(std::string name, int ordinal) {
  std::unique_ptr<GpuDevice> d(new GpuDevice(name, ordinal));
  absl::Status s = d->Init();
  if (!s.ok()) return Annotate(s, absl::StrCat("creating ", name));
  return d;
}

absl::Status GpuDevice::Init() {
  int count = 0;
  WEFT_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (ordinal_ < 0 || ordinal_ >= count) {
    return absl::UnavailableError(absl::StrCat("no GPU ", ordinal_, ": ", count, " visible"));
  }
  WEFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  cudaDeviceProp prop;
  WEFT_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, ordinal_));
  physical_desc_ = "GPU-";
  for (unsigned char byte : prop.uuid.bytes) absl::StrAppend(&physical_desc_, absl::Hex(byte, absl::kZeroPad2));
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&h2d_, cudaStreamNonBlocking));
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&d2h_, cudaStreamNonBlocking));
  {
    absl::MutexLock h(&h2d_mu_);
    WEFT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&h2d_done_, cudaEventDisableTiming));
    WEFT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&h2d_ready_, cudaEventDisableTiming));
    WEFT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ahead_mark_, cudaEventDisableTiming));
    WEFT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ahead_done_, cudaEventDisableTiming));
  }
  {
    absl::MutexLock d(&d2h_mu_);
    WEFT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&d2h_ready_, cudaEventDisableTiming));
  }
  WEFT_CUBLAS_RETURN_IF_ERROR(cublasCreate(&cublas_));
  WEFT_CUBLAS_RETURN_IF_ERROR(cublasSetStream(cublas_, compute_));
  WEFT_CUDNN_RETURN_IF_ERROR(cudnnCreate(&cudnn_));
  WEFT_CUDNN_RETURN_IF_ERROR(cudnnSetStream(cudnn_, compute_));
  allocator_ = std::make_unique<GpuAllocator>(ordinal_, compute_);
  pinned_ = std::make_unique<PinnedAllocator>();
  completion_thread_ = std::thread([this] { CompletionLoop(); });
  return absl::OkStatus();
}

cudaEvent_t GpuDevice::GetEvent() {
  if (!spare_events_.empty()) {
    cudaEvent_t e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  // Blocking sync: the completion thread sleeps instead of spinning a core.
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventBlockingSync) != cudaSuccess) return nullptr;
  return e;
}

void GpuDevice::ThenExecute(cudaStream_t stream, std::function<void()> fn) {
  ThenExecute(stream, std::function<void(absl::Status)>([fn = std::move(fn)](absl::Status) { fn(); }));
}

void GpuDevice::ThenExecute(cudaStream_t stream, std::function<void(absl::Status)> fn) {
  MakeCurrent().IgnoreError();  // events belong to the device current when they are made
  cudaError_t recorded = cudaSuccess;
  {
    absl::MutexLock lock(&completion_mu_);
    cudaEvent_t e = GetEvent();
    if (e != nullptr) recorded = cudaEventRecord(e, stream);
    if (e != nullptr && recorded == cudaSuccess) {
      completions_.push_back(Completion{e, std::move(fn)});
      return;
    }
    if (e != nullptr) spare_events_.push_back(e);
  }
  // No event (the device is in an error state): wait here instead.
  absl::Status s = recorded != cudaSuccess ? CudaStatus(recorded, "cudaEventRecord")
                                           : CudaStatus(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  fn(s);
}

void GpuDevice::CompletionLoop() {
  cudaSetDevice(ordinal_);
  for (;;) {
    Completion c;
    {
      absl::MutexLock lock(&completion_mu_);
      completion_mu_.Await(absl::Condition(
          +[](GpuDevice* d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(d->completion_mu_) {
            return d->stopping_ || !d->completions_.empty();
          },
          this));
      if (completions_.empty()) return;  // stopping, nothing left
      c = std::move(completions_.front());
      completions_.pop_front();
    }
    c.fn(CudaStatus(cudaEventSynchronize(c.event), "cudaEventSynchronize"));
    absl::MutexLock lock(&completion_mu_);
    spare_events_.push_back(c.event);
  }
}

GpuDevice::~GpuDevice() {
  cudaSetDevice(ordinal_);
  if (completion_thread_.joinable()) {
    {
      absl::MutexLock lock(&completion_mu_);
      stopping_ = true;
    }
    completion_thread_.join();
  }
  if (compute_ != nullptr) cudaStreamSynchronize(compute_);
  // Variables hold device buffers: drop them before the allocator goes.
  resources()->Clear();
  if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  allocator_.reset();
  pinned_.reset();
  {
    absl::MutexLock h(&h2d_mu_);
    if (h2d_done_ != nullptr) cudaEventDestroy(h2d_done_);
    if (h2d_ready_ != nullptr) cudaEventDestroy(h2d_ready_);
    if (ahead_mark_ != nullptr) cudaEventDestroy(ahead_mark_);
    if (ahead_done_ != nullptr) cudaEventDestroy(ahead_done_);
  }
  {
    absl::MutexLock d(&d2h_mu_);
    if (d2h_ready_ != nullptr) cudaEventDestroy(d2h_ready_);
  }
  {
    absl::MutexLock lock(&completion_mu_);
    for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  }
  for (cudaStream_t s : {compute_, h2d_, d2h_}) {
    if (s != nullptr) cudaStreamDestroy(s);
  }
}

Allocator* GpuDevice::allocator() { return allocator_.get(); }
Allocator* GpuDevice::pinned_allocator() { return pinned_.get(); }

absl::Status GpuDevice::MakeCurrent() const {
  // cudaGetDevice reads the runtime's thread-local state: far cheaper than
  // cudaSetDevice, and right whoever changed the device last.
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == ordinal_) return absl::OkStatus();
  WEFT_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal_));
  return absl::OkStatus();
}

absl::Status GpuDevice::CopyHostToDevice(const void* host, void* dev, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(MakeCurrent());
  absl::MutexLock lock(&h2d_mu_);
  // `dev` may be a block that earlier kernels still read (stream-ordered
  // reuse): the copy waits for them, and later kernels wait for the copy.
  WEFT_CUDA_RETURN_IF_ERROR(cudaEventRecord(h2d_ready_, compute_));
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(h2d_, h2d_ready_, 0));
  WEFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, h2d_));
  WEFT_CUDA_RETURN_IF_ERROR(cudaEventRecord(h2d_done_, h2d_));
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute_, h2d_done_, 0));
  return absl::OkStatus();
}

absl::Status GpuDevice::CopyDeviceToHost(const void* dev, void* host, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(MakeCurrent());
  absl::MutexLock lock(&d2h_mu_);
  WEFT_CUDA_RETURN_IF_ERROR(cudaEventRecord(d2h_ready_, compute_));
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(d2h_, d2h_ready_, 0));
  WEFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, d2h_));
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(d2h_));
  return absl::OkStatus();
}

absl::Status GpuDevice::CopyDeviceToDevice(const void* src, void* dst, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  RETURN_IF_ERROR(MakeCurrent());
  WEFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> GpuDevice::CopyToHost(const Tensor& t) {
  if (t.on_host()) return t;
  ASSIGN_OR_RETURN(Tensor host, Tensor::Allocate(t.dtype(), t.shape(), pinned_.get()));
  RETURN_IF_ERROR(CopyDeviceToHost(t.raw_data(), host.raw_data(), t.TotalBytes()));
  return host;
}

void GpuDevice::CopyToHostAsync(const Tensor& dev, std::function<void(absl::Status, Tensor)> done) {
  absl::StatusOr<Tensor> host = Tensor::Allocate(dev.dtype(), dev.shape(), pinned_.get());
  if (!host.ok()) return done(host.status(), Tensor());
  absl::Status s = [&]() -> absl::Status {
    RETURN_IF_ERROR(MakeCurrent());
    absl::MutexLock lock(&d2h_mu_);
    WEFT_CUDA_RETURN_IF_ERROR(cudaEventRecord(d2h_ready_, compute_));
    WEFT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(d2h_, d2h_ready_, 0));
    WEFT_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(host->raw_data(), dev.raw_data(), dev.TotalBytes(), cudaMemcpyDeviceToHost, d2h_));
    return absl::OkStatus();
  }();
  if (!s.ok()) return done(s, Tensor());
  // The callback owns `dev` until the copy is done, so its block cannot be
  // reused under the copy.
  ThenExecute(d2h_, std::function<void(absl::Status)>(
                        [dev, host = *std::move(host), done = std::move(done)](absl::Status st) mutable {
                          done(st, st.ok() ? std::move(host) : Tensor());
                        }));
}

absl::StatusOr<Tensor> GpuDevice::CopyFromHost(const Tensor& host) {
  if (!host.on_host()) return host;
  ASSIGN_OR_RETURN(Tensor dev, Tensor::Allocate(host.dtype(), host.shape(), allocator_.get()));
  RETURN_IF_ERROR(CopyFromHostInto(host, &dev));
  return dev;
}

namespace {

absl::Status CheckCopy(const Tensor& from, const Tensor& to, const std::string& device) {
  if (from.dtype() == to.dtype() && from.shape() == to.shape() && !to.on_host()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("copying ", DTypeName(from.dtype()), from.shape().DebugString(),
                                                 " into ", to.on_host() ? "host " : "", DTypeName(to.dtype()),
                                                 to.shape().DebugString(), " on ", device));
}

}  // namespace

absl::StatusOr<Tensor> GpuDevice::Pinned(const Tensor& host) {
  cudaPointerAttributes attr;
  const bool pinned = cudaPointerGetAttributes(&attr, host.raw_data()) == cudaSuccess &&
                      attr.type == cudaMemoryTypeHost;
  if (pinned) return host;
  cudaGetLastError();
  ASSIGN_OR_RETURN(Tensor staged, Tensor::Allocate(host.dtype(), host.shape(), pinned_.get()));
  std::memcpy(staged.raw_data(), host.raw_data(), host.TotalBytes());
  return staged;
}

absl::Status GpuDevice::CopyIn(const Tensor& host, Tensor* dev,
                              absl::FunctionRef<absl::Status(const void* pinned, size_t bytes)> enqueue) {
  RETURN_IF_ERROR(CheckCopy(host, *dev, name()));
  const size_t bytes = host.TotalBytes();
  if (bytes == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(Tensor staged, Pinned(host));
  RETURN_IF_ERROR(enqueue(staged.raw_data(), bytes));
  // The pinned source must outlive the asynchronous copy.
  ThenExecute(h2d_, [staged = std::move(staged)]() mutable { staged = Tensor(); });
  return absl::OkStatus();
}

absl::Status GpuDevice::CopyFromHostInto(const Tensor& host, Tensor* dev) {
  return CopyIn(host, dev, [&](const void* pinned, size_t bytes) {
    return CopyHostToDevice(pinned, dev->raw_data(), bytes);
  });
}

absl::Status GpuDevice::MarkCopyAhead() {
  RETURN_IF_ERROR(MakeCurrent());
  absl::MutexLock lock(&h2d_mu_);
  WEFT_CUDA_RETURN_IF_ERROR(cudaEventRecord(ahead_mark_, compute_));
  return absl::OkStatus();
}

absl::Status GpuDevice::StartCopyAhead(const Tensor& host, Tensor* dev) {
  return CopyIn(host, dev, [&](const void* pinned, size_t bytes) -> absl::Status {
    RETURN_IF_ERROR(MakeCurrent());
    // Released before the copy is done, `dev`'s block waits for it.
    allocator_->RecordStream(dev->raw_data(), h2d_);
    absl::MutexLock lock(&h2d_mu_);
    // After the work before the mark (the kernels that last read `dev`), not
    // the work since (the step computing now).
    WEFT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(h2d_, ahead_mark_, 0));
    WEFT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dev->raw_data(), pinned, bytes, cudaMemcpyHostToDevice, h2d_));
    return absl::OkStatus();
  });
}

absl::Status GpuDevice::FinishCopyAhead() {
  RETURN_IF_ERROR(MakeCurrent());
  absl::MutexLock lock(&h2d_mu_);
  WEFT_CUDA_RETURN_IF_ERROR(cudaEventRecord(ahead_done_, h2d_));
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute_, ahead_done_, 0));
  return absl::OkStatus();
}

absl::Status GpuDevice::CopyOnDevice(const Tensor& src, Tensor* dst) {
  RETURN_IF_ERROR(CheckCopy(src, *dst, name()));
  if (src.on_host()) return absl::InvalidArgumentError(absl::StrCat("CopyOnDevice from host memory on ", name()));
  return CopyDeviceToDevice(src.raw_data(), dst->raw_data(), src.TotalBytes());
}

namespace {

// A recorded step: the instantiated graph, and the allocator pool that holds
// every block its kernels use.
class CudaStepGraph final : public DeviceStepGraph {
 public:
  CudaStepGraph(GpuDevice* device, GpuAllocator* allocator, int pool, cudaGraph_t graph, cudaGraphExec_t exec)
      : device_(device), allocator_(allocator), pool_(pool), graph_(graph), exec_(exec) {}
  ~CudaStepGraph() override {
    // The last launch must be done before its blocks go back to the cache.
    device_->Synchronize().IgnoreError();
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
    allocator_->ReleasePool(pool_);
  }
  absl::Status Launch() override {
    RETURN_IF_ERROR(device_->MakeCurrent());
    WEFT_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_, device_->stream()));
    return absl::OkStatus();
  }

 private:
  GpuDevice* const device_;
  GpuAllocator* const allocator_;
  const int pool_;
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
};

}  // namespace

absl::Status GpuDevice::BeginStepCapture() {
  RETURN_IF_ERROR(MakeCurrent());
  if (capture_pool_ != 0) return absl::FailedPreconditionError(absl::StrCat(name(), " is recording a step already"));
  // Relaxed: the allocator may still call cudaMalloc or query an event while
  // the stream is captured; neither is recorded.
  capture_pool_ = allocator_->BeginPool();
  const cudaError_t e = cudaStreamBeginCapture(compute_, cudaStreamCaptureModeRelaxed);
  if (e != cudaSuccess) {
    allocator_->EndPool();
    allocator_->ReleasePool(capture_pool_);
    capture_pool_ = 0;
    return CudaStatus(e, "cudaStreamBeginCapture");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeviceStepGraph>> GpuDevice::EndStepCapture() {
  if (capture_pool_ == 0) return absl::FailedPreconditionError(absl::StrCat(name(), " is not recording a step"));
  const int pool = capture_pool_;
  capture_pool_ = 0;
  allocator_->EndPool();
  cudaGraph_t graph = nullptr;
  absl::Status status = CudaStatus(cudaStreamEndCapture(compute_, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  if (status.ok()) status = CudaStatus(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  if (!status.ok()) {
    cudaGetLastError();
    if (graph != nullptr) cudaGraphDestroy(graph);
    // Nothing recorded ever ran, so the pool's blocks are free now.
    allocator_->ReleasePool(pool);
    return status;
  }
  return std::unique_ptr<DeviceStepGraph>(new CudaStepGraph(this, allocator_.get(), pool, graph, exec));
}

absl::Status GpuDevice::Synchronize() {
  RETURN_IF_ERROR(MakeCurrent());
  WEFT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(compute_));
  return absl::OkStatus();
}

}  // namespace gpu
}  // namespace weft
