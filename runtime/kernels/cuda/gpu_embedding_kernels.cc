// GPU kernels for Embedding and EmbeddingGrad (graph/ops/embedding_ops.cc),
// on the skeletons the CPU kernels share (runtime/kernels/embedding_kernels.h):
// the same checks, messages and outputs. The launches are embedding.cu's.
//
// The ids live on the device, so, as with SparseSoftmaxCrossEntropyWithLogits'
// labels (gpu_nn_kernels.cc), a bad id cannot be seen before the launch
// without waiting for the device. The launch records the first bad id in
// host-mapped memory (the lookup writes NaN for its row; the gradient
// leaves it out) and the node's next Compute reports INVALID_ARGUMENT: the
// CPU's message, with the flat position in the ids of the step that held
// it. One step may therefore finish before the error is reported.
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "runtime/kernels/cuda/gpu_kernel_util.h"
#include "runtime/kernels/cuda/gpu_launch.h"
#include "runtime/kernels/embedding_kernels.h"
#include "runtime/op_kernel.h"

namespace weft {
namespace gpu_kernels {
namespace {

using kernels::EmbeddingGeometry;

// The host-mapped record of the first bad id a launch saw: [flag, position,
// value (a double's bits), rows]. Thread-safe.
class BadIdRecord {
 public:
  // `found` ends the message: what the earlier step did with the id.
  BadIdRecord(OpKernelConstruction* c, const char* found, DType ids_dtype) : found_(found), ids_dtype_(ids_dtype) {
    absl::Status current = Gpu(c)->MakeCurrent();
    if (!current.ok()) {
      c->SetStatus(current);
      return;
    }
    void* p = nullptr;
    cudaError_t err = cudaHostAlloc(&p, 4 * sizeof(int64_t), cudaHostAllocMapped);
    if (err != cudaSuccess) {
      c->SetStatus(gpu::CudaStatus(err, "cudaHostAlloc (bad id record)"));
      return;
    }
    host_ = static_cast<volatile int64_t*>(p);
    for (int i = 0; i < 4; ++i) host_[i] = 0;
    err = cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), p, 0);
    if (err != cudaSuccess) c->SetStatus(gpu::CudaStatus(err, "cudaHostGetDevicePointer (bad id record)"));
  }
  ~BadIdRecord() {
    // cudaFreeHost waits for the device, so no launch still writes the record.
    if (host_ != nullptr) cudaFreeHost(const_cast<int64_t*>(host_));
  }
  BadIdRecord(const BadIdRecord&) = delete;
  BadIdRecord& operator=(const BadIdRecord&) = delete;

  // The bad id an earlier launch recorded, once; reading host-mapped memory
  // does not wait for the device.
  absl::Status CheckIds(OpKernelContext*, const Tensor&, int64_t) { return CheckRecordedLaunches(); }
  absl::Status CheckRecordedLaunches() {
    if (host_ == nullptr || host_[0] != 2) return absl::OkStatus();
    absl::MutexLock lock(&mu_);
    if (host_[0] != 2) return absl::OkStatus();
    const int64_t position = host_[1], bits = host_[2], rows = host_[3];
    host_[0] = 0;
    double value;
    std::memcpy(&value, &bits, sizeof(value));
    absl::Status s = kernels::BadIdError(absl::StrCat("ids (flat index ", position, ")"), value, ids_dtype_, rows);
    return absl::InvalidArgumentError(
        absl::StrCat(s.message(), " (found on the GPU in an earlier step, ", found_, ")"));
  }

  int64_t* device() const { return device_; }

 private:
  const char* found_;
  const DType ids_dtype_;
  absl::Mutex mu_;
  volatile int64_t* host_ = nullptr;
  int64_t* device_ = nullptr;
};

class Embedding : public BadIdRecord {
 public:
  explicit Embedding(OpKernelConstruction* c) : BadIdRecord(c, "whose rows for it are NaN", c->input_type(1)) {}
  void Run(OpKernelContext* ctx, const EmbeddingGeometry& g, const Tensor& params, const Tensor& ids, Tensor* out) {
    const float* p = params.data<float>();
    float* o = out->data<float>();
    OP_REQUIRES_CUDA(ctx,
                     ids.dtype() == DType::kInt32
                         ? LaunchEmbedding(p, ids.data<int32_t>(), g.ids, g.rows, g.width, o, device(), Stream(ctx))
                         : LaunchEmbedding(p, ids.data<float>(), g.ids, g.rows, g.width, o, device(), Stream(ctx)),
                     "Embedding kernel");
  }
};

class EmbeddingGrad : public BadIdRecord {
 public:
  explicit EmbeddingGrad(OpKernelConstruction* c) : BadIdRecord(c, "whose gradient left it out", c->input_type(0)) {}
  void Run(OpKernelContext* ctx, const EmbeddingGeometry& g, const Tensor& ids, const Tensor& grad,
           Tensor* dparams) {
    const float* gp = grad.data<float>();
    float* d = dparams->data<float>();
    OP_REQUIRES_CUDA(
        ctx,
        ids.dtype() == DType::kInt32
            ? LaunchEmbeddingGrad(ids.data<int32_t>(), gp, g.ids, g.rows, g.width, d, device(), Stream(ctx))
            : LaunchEmbeddingGrad(ids.data<float>(), gp, g.ids, g.rows, g.width, d, device(), Stream(ctx)),
        "EmbeddingGrad kernel");
  }
};

WEFT_REGISTER_KERNEL("Embedding", "GPU", kernels::EmbeddingKernel<Embedding>);
WEFT_REGISTER_KERNEL("EmbeddingGrad", "GPU", kernels::EmbeddingGradKernel<EmbeddingGrad>);

}  // namespace
}  // namespace gpu_kernels
}  // namespace weft
