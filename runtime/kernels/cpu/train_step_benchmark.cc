// Times SGD training steps on one CPU thread: the benchmark MLP
// (784-256-128-10, ReLU, sparse softmax cross entropy) or, with "cnn", a small
// CNN (conv5x5x32-pool-conv5x5x64-pool-dense128-dense10).
//
//   bazel run -c opt //runtime/kernels/cpu:train_step_benchmark -- [mlp|cnn] [batch] [steps]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

#include "graph/builder.h"
#include "graph/gradients.h"
#include "graph/ops/ops.h"
#include "runtime/device.h"
#include "runtime/executor.h"

namespace weft {
namespace {

int Main(int argc, char** argv) {
  const bool cnn = argc > 1 && std::string(argv[1]) == "cnn";
  const int64_t batch = argc > 2 ? std::atoi(argv[2]) : 64;
  const int steps = argc > 3 ? std::atoi(argv[3]) : (cnn ? 50 : 2000);
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {-1, 784}, "x");
  Output labels = b.Placeholder(DType::kInt32, {-1}, "labels");
  std::vector<Output> params;
  auto dense = [&](Output in, int64_t n_in, int64_t n_out, bool relu) {
    const std::string id = std::to_string(params.size());
    Output w = b.Variable("w" + id, DType::kFloat32, {n_in, n_out}, "glorot_uniform", params.size());
    Output bias = b.Variable("b" + id, DType::kFloat32, {n_out}, "zeros");
    params.push_back(w);
    params.push_back(bias);
    Output out = ops::BiasAdd(&b, ops::MatMul(&b, in, w), bias);
    return relu ? ops::Relu(&b, out) : out;
  };
  auto conv = [&](Output in, int64_t c_in, int64_t c_out) {
    const std::string id = std::to_string(params.size());
    Output f = b.Variable("f" + id, DType::kFloat32, {5, 5, c_in, c_out}, "he_normal", params.size());
    Output bias = b.Variable("b" + id, DType::kFloat32, {c_out}, "zeros");
    params.push_back(f);
    params.push_back(bias);
    return ops::MaxPool(&b, ops::Relu(&b, ops::BiasAdd(&b, ops::Conv2D(&b, in, f, 1, "SAME"), bias)), 2);
  };
  Output h;
  if (cnn) {
    h = ops::Reshape(&b, x, {-1, 28, 28, 1});
    h = conv(conv(h, 1, 32), 32, 64);
    h = dense(dense(ops::Reshape(&b, h, {-1, 7 * 7 * 64}), 7 * 7 * 64, 128, true), 128, 10, false);
  } else {
    h = dense(dense(dense(x, 784, 256, true), 256, 128, true), 128, 10, false);
  }
  Output loss = ops::Mean(&b, ops::SparseSoftmaxCrossEntropyWithLogits(&b, h, labels).loss, "loss");
  auto grads = AddGradients(&b, loss, params);
  if (!grads.ok()) {
    std::fprintf(stderr, "%s\n", std::string(grads.status().message()).c_str());
    return 1;
  }
  ExecutorOptions opts;
  opts.feeds = {"x", "labels"};
  opts.fetches = {"loss"};
  for (size_t i = 0; i < params.size(); ++i) {
    opts.targets.push_back(ops::ApplyGradientDescent(&b, params[i], (*grads)[i], 0.05f).node->name());
  }
  if (!b.status().ok()) {
    std::fprintf(stderr, "%s\n", std::string(b.status().message()).c_str());
    return 1;
  }
  CpuDevice device("/device:CPU:0", 1);
  auto exec = Executor::Create(&g, &device, opts);
  if (!exec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(exec.status().message()).c_str());
    return 1;
  }
  Tensor xv(DType::kFloat32, {batch, 784});
  Tensor lv(DType::kInt32, {batch});
  std::mt19937 rng(1);
  for (float& v : xv.flat<float>()) v = std::uniform_real_distribution<float>(0, 1)(rng);
  for (int32_t& v : lv.flat<int32_t>()) v = rng() % 10;
  std::vector<Tensor> out;
  for (int i = 0; i < (cnn ? 3 : 50); ++i) (void)(*exec)->Run({xv, lv}, &out, i);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) {
    absl::Status s = (*exec)->Run({xv, lv}, &out, i);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s batch %ld: %.1f us/step, %.0f samples/s, loss %.4f, %d nodes/step\n", cnn ? "cnn" : "mlp", batch, 1e6 * secs / steps,
              steps * batch / secs, out[0].data<float>()[0], (*exec)->num_nodes());
  return 0;
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) { return weft::Main(argc, argv); }
