// GpuDevice: one CUDA GPU as a weft Device ("GPU").
//
// Work on a GPU is ordered by streams, not by the host threads that enqueue
// it. Every GPU kernel enqueues its work on the device's compute stream(), in
// the order the executor runs the kernels, and returns without waiting; the
// stream therefore carries the graph's data dependencies. cuBLAS and cuDNN
// handles are bound to that stream. Host<->device copies run on two separate
// copy streams, ordered against the compute stream with events, so that a
// transfer never races the kernels that produce or consume its buffer.
//
// Memory: allocator() is a caching device allocator (GpuAllocator) whose
// reuse is stream-ordered on stream(): a buffer released by the host may be
// handed to the next kernel at once, because that kernel runs after every
// earlier use on the same stream. pinned_allocator() hands out page-locked
// host memory for staging copies. Once warm, a step calls neither cudaMalloc
// nor cudaHostAlloc (see GpuAllocator::GetStats).
//
// Every CUDA, cuBLAS, cuDNN and NCCL result is turned into an absl::Status
// that names the failing call, e.g.
// "cudaMemcpyAsync: an illegal memory access was encountered".
//
// This header needs the CUDA toolkit: include it only from code built under
// --config=cuda (select on //tools:cuda). Code that must build either way
// uses runtime/gpu/gpu_devices.h.
//
// Thread-safety: thread-safe, except that the executor runs the kernels of
// one GpuDevice one at a time (it holds compute_mutex() around Compute), so
// a kernel may use cublas() and cudnn() without locking.
#ifndef WEFT_RUNTIME_GPU_GPU_DEVICE_H_
#define WEFT_RUNTIME_GPU_GPU_DEVICE_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/allocator.h"
#include "runtime/device.h"

namespace weft {
namespace gpu {

class GpuAllocator;
class PinnedAllocator;

// Status helpers naming the failing call. Codes: out of memory is
// RESOURCE_EXHAUSTED, a missing or unusable device UNAVAILABLE, everything
// else INTERNAL.
absl::Status CudaStatus(cudaError_t e, const char* call);
absl::Status CublasStatus(cublasStatus_t s, const char* call);
absl::Status CudnnStatus(cudnnStatus_t s, const char* call);
absl::Status NcclStatus(ncclResult_t r, const char* call);

// Evaluates a call that returns cudaError_t; on failure returns from the
// enclosing function with CudaStatus(e, "<the call's text>").
#define WEFT_CUDA_RETURN_IF_ERROR(call)                                       \
  do {                                                                        \
    const cudaError_t weft_cuda_e_ = (call);                                  \
    if (weft_cuda_e_ != cudaSuccess) return ::weft::gpu::CudaStatus(weft_cuda_e_, #call); \
  } while (0)
#define WEFT_CUBLAS_RETURN_IF_ERROR(call)                                     \
  do {                                                                        \
    const cublasStatus_t weft_cublas_s_ = (call);                             \
    if (weft_cublas_s_ != CUBLAS_STATUS_SUCCESS) return ::weft::gpu::CublasStatus(weft_cublas_s_, #call); \
  } while (0)
#define WEFT_CUDNN_RETURN_IF_ERROR(call)                                      \
  do {                                                                        \
    const cudnnStatus_t weft_cudnn_s_ = (call);                               \
    if (weft_cudnn_s_ != CUDNN_STATUS_SUCCESS) return ::weft::gpu::CudnnStatus(weft_cudnn_s_, #call); \
  } while (0)
#define WEFT_NCCL_RETURN_IF_ERROR(call)                                       \
  do {                                                                        \
    const ncclResult_t weft_nccl_r_ = (call);                                 \
    if (weft_nccl_r_ != ncclSuccess) return ::weft::gpu::NcclStatus(weft_nccl_r_, #call); \
  } while (0)

class GpuDevice final : public Device {
 public:
  // Opens GPU `ordinal` (cudaSetDevice), creates its streams, handles and
  // allocators. `name`: e.g. "/job:worker/task:0/device:GPU:0".
  // UNAVAILABLE when there is no such GPU or no driver.
  static absl::StatusOr<std::unique_ptr<GpuDevice>> Create(std::string name, int ordinal);
  ~GpuDevice() override;

  int ordinal() const { return ordinal_; }
  // "GPU-" and the GPU's UUID in hex: the same for every process that opens
  // this GPU.
  std::string physical_device_desc() const override { return physical_desc_; }
  // The compute stream: every GPU kernel enqueues here, in order.
  cudaStream_t stream() const { return compute_; }
  // Bound to stream(). Not for concurrent use (see compute_mutex()).
  cublasHandle_t cublas() const { return cublas_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  // Caching device allocator, stream-ordered on stream(); not on_host().
  Allocator* allocator() override;
  // The same object with its device-specific interface (stats, Trim).
  GpuAllocator* gpu_allocator() { return allocator_.get(); }
  // Page-locked host memory (on_host()) for staging transfers.
  Allocator* pinned_allocator();
  absl::Mutex* compute_mutex() override { return &compute_mu_; }

  // Host->device: enqueued so that later work on stream() sees the data
  // (and earlier work on stream() is done with `dev` before it is written).
  // Returns without waiting for the transfer: a pinned `host` must stay
  // valid until Synchronize(); pageable memory may be reused on return
  // (the driver has staged it by then).
  absl::Status CopyHostToDevice(const void* host, void* dev, size_t bytes);
  // Device->host: waits for all earlier work on stream(), then copies;
  // returns when the data is on the host.
  absl::Status CopyDeviceToHost(const void* dev, void* host, size_t bytes);
  // Device->device on stream().
  absl::Status CopyDeviceToDevice(const void* src, void* dst, size_t bytes);
  // Waits for everything enqueued on stream() so far; the first error a
  // kernel hit (asynchronously) surfaces here, naming the sync.
  absl::Status Synchronize() override;

  // Tensor-level copies (Device's interface). CopyToHost returns a pinned
  // host tensor once every kernel enqueued before the call is done.
  // CopyFromHost stages pageable memory through a pinned buffer, so it never
  // waits for the device, and `host` may be released on return.
  absl::StatusOr<Tensor> CopyToHost(const Tensor& t) override;
  absl::StatusOr<Tensor> CopyFromHost(const Tensor& host) override;
  absl::Status CopyFromHostInto(const Tensor& host, Tensor* dev) override;
  // Copying ahead runs on the host->device copy stream, after an event on
  // stream() that MarkCopyAhead records; FinishCopyAhead makes stream() wait
  // for an event recorded on the copy stream.
  absl::Status MarkCopyAhead() override;
  absl::Status StartCopyAhead(const Tensor& host, Tensor* dev) override;
  absl::Status FinishCopyAhead() override;
  absl::Status CopyOnDevice(const Tensor& src, Tensor* dst) override;
  // Step recording as a CUDA graph: stream capture of stream() in relaxed
  // mode, every device block handed out meanwhile kept in the graph's pool
  // (GpuAllocator::BeginPool) until the graph is destroyed.
  absl::Status BeginStepCapture() override;
  absl::StatusOr<std::unique_ptr<DeviceStepGraph>> EndStepCapture() override;
  // Device->host without blocking: enqueues the copy of `dev` (after every
  // kernel enqueued so far) into a new pinned tensor and calls `done` with it
  // from the device's completion thread once it is there. `dev` is kept
  // alive until then.
  void CopyToHostAsync(const Tensor& dev, std::function<void(absl::Status, Tensor)> done);
  // Calls `fn` from the device's completion thread once the work enqueued on
  // `stream` so far has finished (or failed: the stream's error is then
  // reported by the next sync). `fn` may call CUDA and must not block long.
  void ThenExecute(cudaStream_t stream, std::function<void()> fn);
  // The same, with the CUDA status of the wait ("cudaEventSynchronize: ...").
  void ThenExecute(cudaStream_t stream, std::function<void(absl::Status)> fn);
  // Makes this GPU the calling thread's current CUDA device (a cheap check
  // when it already is).
  absl::Status MakeCurrent() const;
  void BindThread() override { MakeCurrent().IgnoreError(); }

 private:
  GpuDevice(std::string name, int ordinal);
  absl::Status Init();
  // The completion thread: waits for each queued event in turn, then runs
  // its callback.
  void CompletionLoop();
  cudaEvent_t GetEvent() ABSL_EXCLUSIVE_LOCKS_REQUIRED(completion_mu_);
  // `host` itself when it is page-locked, else a pinned copy of it.
  absl::StatusOr<Tensor> Pinned(const Tensor& host);
  // Checks that `host` fits `dev`, stages it in pinned memory, lets
  // `enqueue` start the copy from there, and keeps the pinned memory until
  // the copy stream has passed it.
  absl::Status CopyIn(const Tensor& host, Tensor* dev,
                      absl::FunctionRef<absl::Status(const void* pinned, size_t bytes)> enqueue);

  const int ordinal_;
  std::string physical_desc_;  // set by Init
  cudaStream_t compute_ = nullptr;
  cudaStream_t h2d_ = nullptr;  // copies host->device
  cudaStream_t d2h_ = nullptr;  // copies device->host
  cublasHandle_t cublas_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  std::unique_ptr<GpuAllocator> allocator_;
  std::unique_ptr<PinnedAllocator> pinned_;
  int capture_pool_ = 0;  // the open recording's pool; under compute_mu_
  absl::Mutex compute_mu_;
  // Serialises each copy stream's wait-copy-record sequence.
  absl::Mutex h2d_mu_;
  absl::Mutex d2h_mu_;
  cudaEvent_t h2d_done_ ABSL_GUARDED_BY(h2d_mu_) = nullptr;
  cudaEvent_t h2d_ready_ ABSL_GUARDED_BY(h2d_mu_) = nullptr;
  cudaEvent_t ahead_mark_ ABSL_GUARDED_BY(h2d_mu_) = nullptr;
  cudaEvent_t ahead_done_ ABSL_GUARDED_BY(h2d_mu_) = nullptr;
  cudaEvent_t d2h_ready_ ABSL_GUARDED_BY(d2h_mu_) = nullptr;

  struct Completion {
    cudaEvent_t event;
    std::function<void(absl::Status)> fn;
  };
  absl::Mutex completion_mu_;
  std::deque<Completion> completions_ ABSL_GUARDED_BY(completion_mu_);
  std::vector<cudaEvent_t> spare_events_ ABSL_GUARDED_BY(completion_mu_);
  bool stopping_ ABSL_GUARDED_BY(completion_mu_) = false;
  std::thread completion_thread_;
};

// The GpuDevice behind `device`, or nullptr when it is not a GPU.
inline GpuDevice* AsGpu(Device* device) {
  return device != nullptr && device->device_type() == "GPU" ? static_cast<GpuDevice*>(device) : nullptr;
}

}  // namespace gpu
}  // namespace weft

#endif  // WEFT_RUNTIME_GPU_GPU_DEVICE_H_
