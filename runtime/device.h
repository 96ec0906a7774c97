// A device: where kernels run and variables live.
//
// The CPU device owns an intra-op thread pool (for kernels that split their
// work) and a ResourceMgr with the device's variables. Its allocator is the
// process-wide caching CPU allocator. A GPU device (runtime/gpu/gpu_device.h)
// enqueues its kernels' work on a stream and returns; Synchronize() waits for
// it, and compute_mutex() makes the executor run its kernels one at a time.
//
// Thread-safety: thread-safe.
#ifndef WEFT_RUNTIME_DEVICE_H_
#define WEFT_RUNTIME_DEVICE_H_

#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/allocator.h"
#include "common/tensor.h"
#include "common/thread_pool.h"
#include "runtime/resource_mgr.h"

namespace weft {

// A step's device work recorded once and launched again as a whole (on a
// GPU, a CUDA graph). It owns the device memory its work touches, so that
// nothing else is handed those blocks while it exists; destroying it waits
// for its last launch.
class DeviceStepGraph {
 public:
  virtual ~DeviceStepGraph() = default;
  // Enqueues the recorded work once more, after everything enqueued so far.
  virtual absl::Status Launch() = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  // Full name, e.g. "/job:worker/task:0/device:CPU:0" or "/device:CPU:0".
  const std::string& name() const { return name_; }
  // "CPU" or "GPU": selects kernels.
  const std::string& device_type() const { return type_; }
  virtual Allocator* allocator() = 0;
  // Waits until the work kernels enqueued on this device is done (a GPU's
  // stream); the first asynchronous error surfaces here. CPU: nothing to do.
  virtual absl::Status Synchronize() { return absl::OkStatus(); }
  // Non-null for a device whose kernels must not run concurrently (a GPU's
  // one stream and library handles): the executor holds it around Compute.
  virtual absl::Mutex* compute_mutex() { return nullptr; }
  // Prepares the calling thread to run this device's kernels (a GPU makes
  // itself the thread's current CUDA device); the executor calls it, under
  // compute_mutex(), before each kernel.
  virtual void BindThread() {}
  // What the device physically is ("GPU-<uuid>"); "" when that does not
  // matter (CPUs). Reported in DeviceAttributes.physical_device_desc.
  virtual std::string physical_device_desc() const { return ""; }
  // False when this device's tensors live in device memory (a GPU).
  bool host_memory() { return allocator()->on_host(); }
  // A host copy of `t` once the work producing it is done; `t` itself when it
  // is already on the host (every tensor of a CPU device).
  virtual absl::StatusOr<Tensor> CopyToHost(const Tensor& t) { return t; }
  // A tensor of this device with `host`'s contents, ordered before every
  // kernel enqueued after the call; `host` itself on a CPU device. `host`
  // may be released as soon as this returns.
  virtual absl::StatusOr<Tensor> CopyFromHost(const Tensor& host) { return host; }
  // Writes `host`'s contents into `dev`, a tensor of this device of the same
  // dtype and shape, ordered like CopyFromHost. A CPU device copies.
  virtual absl::Status CopyFromHostInto(const Tensor& host, Tensor* dev);
  // Copying the next step's feeds while this step computes (a recorded
  // step, step_recording.h). MarkCopyAhead notes the work enqueued so far;
  // StartCopyAhead copies `host` into `dev` once that work is done, not
  // waiting for work enqueued after the mark (REQUIRES: none of it uses
  // `dev`); FinishCopyAhead orders the work enqueued after it after every
  // copy started. A CPU device copies at once.
  virtual absl::Status MarkCopyAhead() { return absl::OkStatus(); }
  virtual absl::Status StartCopyAhead(const Tensor& host, Tensor* dev) { return CopyFromHostInto(host, dev); }
  virtual absl::Status FinishCopyAhead() { return absl::OkStatus(); }
  // `src` into `dst`, two tensors of this device of one dtype and shape,
  // ordered like a kernel.
  virtual absl::Status CopyOnDevice(const Tensor& src, Tensor* dst) { return CopyFromHostInto(src, dst); }

  // Step recording (executor.h, ExecutorOptions::record_device_steps).
  // BeginStepCapture starts recording what kernels enqueue from the calling
  // thread, which must hold compute_mutex() until EndStepCapture; the work is
  // recorded, not run. EndStepCapture ends it and returns the recording, or
  // the reason none could be made (a kernel that waited for the device, say).
  // UNIMPLEMENTED on a device that cannot record (a CPU).
  virtual absl::Status BeginStepCapture() { return absl::UnimplementedError(name() + " cannot record a step"); }
  virtual absl::StatusOr<std::unique_ptr<DeviceStepGraph>> EndStepCapture() {
    return absl::UnimplementedError(name() + " cannot record a step");
  }

  ResourceMgr* resources() { return &resources_; }
  ThreadPool* intra_op_pool() { return intra_op_pool_.get(); }

 protected:
  Device(std::string name, std::string type, int intra_op_threads)
      : name_(std::move(name)),
        type_(std::move(type)),
        // The caller's thread computes too, so N-way parallelism needs N-1 pool threads.
        intra_op_pool_(std::make_unique<ThreadPool>(name_ + "/intra_op", intra_op_threads > 1 ? intra_op_threads - 1 : 0)) {}

 private:
  std::string name_;
  std::string type_;
  ResourceMgr resources_;
  std::unique_ptr<ThreadPool> intra_op_pool_;
};

class CpuDevice final : public Device {
 public:
  // intra_op_threads: parallelism inside one kernel (1: none; 0: one per core).
  CpuDevice(std::string name, int intra_op_threads)
      : Device(std::move(name), "CPU", intra_op_threads == 0 ? NumCores() : intra_op_threads) {}
  Allocator* allocator() override { return CpuAllocator(); }
};

inline absl::Status Device::CopyFromHostInto(const Tensor& host, Tensor* dev) {
  if (host.dtype() != dev->dtype() || host.shape() != dev->shape()) {
    return absl::InvalidArgumentError(absl::StrCat("copying ", DTypeName(host.dtype()), host.shape().DebugString(),
                                                   " into ", DTypeName(dev->dtype()), dev->shape().DebugString()));
  }
  if (host.TotalBytes() > 0 && host.raw_data() != dev->raw_data()) {
    std::memcpy(dev->raw_data(), host.raw_data(), host.TotalBytes());
  }
  return absl::OkStatus();
}

}  // namespace weft

#endif  // WEFT_RUNTIME_DEVICE_H_
