// OpKernel: the code that runs one node on one device.
//
// A kernel is constructed once per node when an executor is built (parse and
// validate attributes there, not per step) and its Compute is called once per
// step. Compute reads inputs from the context and either allocates outputs
// through it (which recycles buffers through the device's caching allocator)
// or forwards an input tensor as an output without copying.
//
// Kernels report errors with ctx->SetStatus (bad feeds, shapes known only at
// run time, out-of-range labels); the executor aborts the step and names the
// node. Compute may be called from several threads at once for different
// steps, so a kernel keeps no mutable per-step state of its own.
#ifndef WEFT_RUNTIME_OP_KERNEL_H_
#define WEFT_RUNTIME_OP_KERNEL_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/tensor.h"
#include "common/thread_pool.h"
#include "graph/attr.h"
#include "graph/graph.h"
#include "runtime/collective_runtime.h"
#include "runtime/resource_mgr.h"

namespace weft {

class Device;
class Rendezvous;

// What a kernel sees while it is constructed.
class OpKernelConstruction {
 public:
  // `containers` (borrowed, may be null) outlives the construction.
  OpKernelConstruction(const Node* node, Device* device, const ResourceContainerFn* containers = nullptr)
      : node_(node), device_(device), containers_(containers) {}
  const Node& node() const { return *node_; }
  const NodeDef& def() const { return node_->def(); }
  Device* device() const { return device_; }
  DType input_type(int i) const { return node_->input(i).node->output_type(node_->input(i).index); }
  const TensorShape& input_shape(int i) const { return node_->input(i).node->output_shape(node_->input(i).index); }
  DType output_type(int i) const { return node_->output_type(i); }

  // The store of variables in `container` on this device, which outlives
  // the kernel (resource_mgr.h); nullptr when the executor has no container
  // stores (outside a worker), where a container changes nothing and the
  // kernel keeps using its context's resources().
  absl::StatusOr<ResourceMgr*> container(const std::string& name) const {
    if (containers_ == nullptr || !*containers_) return nullptr;
    return (*containers_)(name);
  }

  void SetStatus(const absl::Status& s) {
    if (status_.ok()) status_ = s;
  }
  const absl::Status& status() const { return status_; }

 private:
  const Node* node_;
  Device* device_;
  const ResourceContainerFn* containers_;
  absl::Status status_;
};

// What a kernel sees while it computes.
class OpKernelContext {
 public:
  struct Params {
    const Node* node = nullptr;
    Device* device = nullptr;
    int64_t step_id = 0;
    // Variables' home; nullptr means the device's.
    ResourceMgr* resources = nullptr;
    // The step's rendezvous for _Send/_Recv; nullptr outside a worker.
    Rendezvous* rendezvous = nullptr;
    // The task's collectives (CollectiveAllReduce); nullptr outside a worker.
    CollectiveRuntime* collectives = nullptr;
    // The step id in device memory, written before the step's kernels run,
    // for kernels whose UsesDeviceStepId() holds; null when the executor
    // keeps none (it does for a recorded step, executor.h).
    const int64_t* device_step_id = nullptr;
    absl::Span<const Tensor* const> inputs;
    absl::Span<Tensor> outputs;  // sized to num_outputs, empty on entry
  };
  explicit OpKernelContext(const Params& p) : p_(p) {}

  const Node& node() const { return *p_.node; }
  Device* device() const { return p_.device; }
  int64_t step_id() const { return p_.step_id; }
  // nullptr when the step has none (RunGraphOnce, the single-process trainer).
  Rendezvous* rendezvous() const { return p_.rendezvous; }
  CollectiveRuntime* collectives() const { return p_.collectives; }
  const int64_t* device_step_id() const { return p_.device_step_id; }
  int num_inputs() const { return static_cast<int>(p_.inputs.size()); }
  const Tensor& input(int i) const { return *p_.inputs[i]; }
  int num_outputs() const { return static_cast<int>(p_.outputs.size()); }

  // Allocates output i on the device. Never throws: returns nullptr and
  // records an error naming the node, the output index, dtype, shape and
  // bytes when the shape is not fully defined or its size overflows
  // (INVALID_ARGUMENT, INTERNAL for an unknown dim) or the memory is not
  // there (RESOURCE_EXHAUSTED).
  Tensor* allocate_output(int i, DType dtype, const TensorShape& shape);
  // A scratch tensor on the device, with allocate_output's checks; the
  // error (naming the node) is returned rather than recorded.
  absl::StatusOr<Tensor> allocate_temp(DType dtype, const TensorShape& shape);
  // Sets output i to `t` (e.g. an input forwarded without a copy).
  void set_output(int i, Tensor t) { p_.outputs[i] = std::move(t); }
  Tensor* mutable_output(int i) { return &p_.outputs[i]; }

  ResourceMgr* resources() const;
  // The device's pool for parallelising inside a kernel (may have 0 threads).
  ThreadPool* intra_op_pool() const;

  void SetStatus(const absl::Status& s) {
    if (status_.ok()) status_ = s;
  }
  const absl::Status& status() const { return status_; }

 private:
  Params p_;
  absl::Status status_;
};

class AsyncOpKernel;

namespace internal {
// impl.CheckRecordedLaunches() where a kernel's device part has one (the GPU
// parts that record errors in host-mapped memory), OK otherwise.
template <typename Impl>
auto CheckRecordedLaunchesOf(Impl& impl, int) -> decltype(impl.CheckRecordedLaunches()) {
  return impl.CheckRecordedLaunches();
}
template <typename Impl>
absl::Status CheckRecordedLaunchesOf(Impl&, long) {
  return absl::OkStatus();
}
// Impl::kUsesDeviceStepId where a kernel's device part has it.
template <typename Impl>
constexpr auto UsesDeviceStepIdOf(int) -> decltype(Impl::kUsesDeviceStepId) {
  return Impl::kUsesDeviceStepId;
}
template <typename Impl>
constexpr bool UsesDeviceStepIdOf(long) {
  return false;
}
}  // namespace internal

class OpKernel {
 public:
  explicit OpKernel(OpKernelConstruction* ctx) : node_(&ctx->node()) {}
  virtual ~OpKernel() = default;
  virtual void Compute(OpKernelContext* ctx) = 0;
  // Non-null for kernels that finish later (e.g. _Recv waiting for a peer).
  virtual AsyncOpKernel* AsAsync() { return nullptr; }
  // After a step replayed from a recording of its device work (executor.h,
  // ExecutorOptions::record_device_steps), in which Compute did not run:
  // what Compute would have checked on the host about earlier launches (a
  // bad label the device recorded), as the step's error.
  virtual absl::Status CheckRecordedLaunches() { return absl::OkStatus(); }
  // True for a kernel that reads the step id from the device when the
  // executor keeps it there (OpKernelContext::device_step_id), so that a
  // recorded launch still sees each step's id (Dropout's mask).
  virtual bool UsesDeviceStepId() const { return false; }
  const Node& node() const { return *node_; }

 private:
  const Node* node_;  // owned by the graph, which outlives the kernel
};

// A kernel that may finish after ComputeAsync returns: it calls `done`
// exactly once, from any thread, when its outputs (or its error) are set.
// The executor keeps the context alive until then and runs other nodes
// meanwhile, so a kernel waiting on another task never holds a thread.
// `done` must not be called while holding a lock the kernel's caller needs.
class AsyncOpKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;
  using DoneCallback = std::function<void()>;
  virtual void ComputeAsync(OpKernelContext* ctx, DoneCallback done) = 0;
  // Blocks until ComputeAsync finishes: for callers without async support.
  void Compute(OpKernelContext* ctx) final;
  AsyncOpKernel* AsAsync() final { return this; }
};

using KernelFactory = std::function<std::unique_ptr<OpKernel>(OpKernelConstruction*)>;

class KernelRegistry {
 public:
  static KernelRegistry* Global();
  // REQUIRES: (op, device_type) not registered yet.
  void Register(const std::string& op, const std::string& device_type, KernelFactory factory);
  // Creates the kernel for `node` on `device`; NOT_FOUND when none is
  // registered, or the construction's error. `containers` (may be null):
  // OpKernelConstruction::container.
  absl::StatusOr<std::unique_ptr<OpKernel>> Create(const Node* node, Device* device,
                                                   const ResourceContainerFn* containers = nullptr) const;
  bool Has(absl::string_view op, absl::string_view device_type) const;

 private:
  absl::flat_hash_map<std::string, KernelFactory> factories_;  // key "op@device_type"
};

namespace internal {
struct KernelRegistrar {
  KernelRegistrar(const std::string& op, const std::string& device_type, KernelFactory f) {
    KernelRegistry::Global()->Register(op, device_type, std::move(f));
  }
};
}  // namespace internal

// WEFT_REGISTER_KERNEL("MatMul", "CPU", MatMulOp);
#define WEFT_REGISTER_KERNEL(op, device_type, cls) WEFT_REGISTER_KERNEL_UNIQ_(__COUNTER__, op, device_type, cls)
#define WEFT_REGISTER_KERNEL_UNIQ_(ctr, op, device_type, cls) WEFT_REGISTER_KERNEL_UNIQ2_(ctr, op, device_type, cls)
#define WEFT_REGISTER_KERNEL_UNIQ2_(ctr, op, device_type, cls)                      \
  static ::weft::internal::KernelRegistrar weft_kernel_registrar_##ctr(             \
      op, device_type, [](::weft::OpKernelConstruction* c) -> std::unique_ptr<::weft::OpKernel> { \
        return std::make_unique<cls>(c);                                            \
      })

// Sets the status and returns from the enclosing function when `s` fails.
#define OP_REQUIRES_OK(ctx, expr)          \
  do {                                     \
    ::absl::Status weft_s_ = (expr);       \
    if (!weft_s_.ok()) {                   \
      (ctx)->SetStatus(weft_s_);           \
      return;                              \
    }                                      \
  } while (0)

#define OP_REQUIRES(ctx, cond, status) \
  do {                                 \
    if (!(cond)) {                     \
      (ctx)->SetStatus(status);        \
      return;                          \
    }                                  \
  } while (0)

}  // namespace weft

#endif  // WEFT_RUNTIME_OP_KERNEL_H_
