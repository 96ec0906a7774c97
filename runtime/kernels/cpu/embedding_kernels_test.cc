// Embedding and EmbeddingGrad against references computed here (float and
// int32 ids, ranks 1 to 3, on one thread and split across a pool), repeated
// ids that accumulate, empty ids, bad ids refused at run time with their
// position and value, and bad operands refused by shape inference naming
// the node. (The gradient as a whole: gradient_check_test.)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "graph/builder.h"
#include "graph/gradients.h"
#include "graph/ops/ops.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::FloatTensor;
using testing::IntTensor;
using testing::RandomTensor;
using testing::RunGraph;
using testing::StatusHas;

// Ids of `shape` in [0, rows), as `dtype`, with many repeats when rows is small.
Tensor RandomIds(const TensorShape& shape, int64_t rows, DType dtype, uint64_t seed) {
  Tensor t(dtype, shape);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> d(0, rows - 1);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    const int64_t v = d(rng);
    if (dtype == DType::kInt32) {
      t.data<int32_t>()[i] = static_cast<int32_t>(v);
    } else {
      t.data<float>()[i] = static_cast<float>(v);
    }
  }
  return t;
}

int64_t IdAt(const Tensor& ids, int64_t i) {
  return ids.dtype() == DType::kInt32 ? ids.data<int32_t>()[i] : static_cast<int64_t>(ids.data<float>()[i]);
}

TensorShape WithRow(TensorShape s, int64_t width) {
  s.AddDim(width);
  return s;
}

// Builds Embedding and EmbeddingGrad over fed params, ids and g, runs both
// and compares them with the gather and the scatter-add computed here (in
// double, in id order).
void ExpectMatchesReference(const TensorShape& ids_shape, int64_t rows, int64_t width, DType dtype, int threads) {
  SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ids ", ids_shape.DebugString(), " of [", rows, ",", width, "] on ",
                            threads, " threads"));
  Tensor params = RandomTensor({rows, width}, 1);
  Tensor ids = RandomIds(ids_shape, rows, dtype, 2);
  const TensorShape out_shape = WithRow(ids_shape, width);
  Tensor grad = RandomTensor(out_shape, 3);
  Graph g;
  GraphBuilder b(&g);
  Output po = b.Placeholder(DType::kFloat32, {rows, width}, "params");
  Output io = b.Placeholder(dtype, TensorShape(std::vector<int64_t>(ids_shape.rank(), -1)), "ids");
  Output go = b.Placeholder(DType::kFloat32, TensorShape(std::vector<int64_t>(out_shape.rank(), -1)), "g");
  Node* e = b.AddNode("Embedding", {po, io}, {}, "emb");
  b.AddNode("EmbeddingGrad", {io, go, po}, {}, "grad");
  ASSERT_TRUE(b.status().ok()) << b.status();
  EXPECT_EQ(e->output_shape(0).rank(), ids_shape.rank() + 1);
  EXPECT_EQ(e->output_shape(0).dim(ids_shape.rank()), width);
  std::vector<Tensor> out;
  absl::Status s = RunGraph(g, {{"params", params}, {"ids", ids}, {"g", grad}}, {"emb:0", "grad:0"}, &out, threads);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(out[0].shape(), out_shape);
  ASSERT_EQ(out[1].shape(), TensorShape({rows, width}));
  std::vector<double> want(rows * width, 0.0);
  for (int64_t i = 0; i < ids.NumElements(); ++i) {
    const int64_t r = IdAt(ids, i);
    for (int64_t c = 0; c < width; ++c) {
      ASSERT_EQ(out[0].data<float>()[i * width + c], params.data<float>()[r * width + c]) << "id " << i;
      want[r * width + c] += grad.data<float>()[i * width + c];
    }
  }
  for (int64_t j = 0; j < rows * width; ++j) {
    ASSERT_NEAR(out[1].data<float>()[j], want[j], 1e-5 * (1.0 + std::abs(want[j]))) << "row " << j / width;
  }
}

TEST(EmbeddingKernelTest, GathersRowsAndScatterAddsTheGradient) {
  for (DType dtype : {DType::kFloat32, DType::kInt32}) {
    ExpectMatchesReference({5}, 7, 3, dtype, 1);
    ExpectMatchesReference({4, 6}, 10, 8, dtype, 1);
    ExpectMatchesReference({2, 3, 4}, 3, 5, dtype, 1);  // 24 ids over 3 rows: every row repeated
    ExpectMatchesReference({1, 1}, 1, 1, dtype, 1);
    // Enough work for the ids and the columns to be split across the pool.
    ExpectMatchesReference({64, 256}, 65, 300, dtype, 4);
  }
}

// The gradient's sums are fixed: each column adds its ids in order, however
// the pool splits the columns.
TEST(EmbeddingKernelTest, TheGradientIsTheSameOnAnyNumberOfThreads) {
  Tensor ids = RandomIds({128, 256}, 5, DType::kInt32, 4);
  Tensor grad = RandomTensor({128, 256, 96}, 5);
  Graph g;
  GraphBuilder b(&g);
  b.AddNode("EmbeddingGrad", {b.Const(ids), b.Const(grad), b.Const(RandomTensor({5, 96}, 6))}, {}, "grad");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> one, four;
  ASSERT_TRUE(RunGraph(g, {}, {"grad:0"}, &one, 1).ok());
  ASSERT_TRUE(RunGraph(g, {}, {"grad:0"}, &four, 4).ok());
  for (int64_t j = 0; j < one[0].NumElements(); ++j) ASSERT_EQ(one[0].data<float>()[j], four[0].data<float>()[j]);
}

TEST(EmbeddingKernelTest, RepeatedIdsAccumulateAndUnusedRowsAreZero) {
  Graph g;
  GraphBuilder b(&g);
  Output ids = b.Const(FloatTensor({2, 2}, {1, 3, 1, 1}));
  Output grad = b.Const(FloatTensor({2, 2, 2}, {1, 10, 2, 20, 3, 30, 4, 40}));
  b.AddNode("EmbeddingGrad", {ids, grad, b.Const(RandomTensor({4, 2}, 1))}, {}, "grad");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> out;
  ASSERT_TRUE(RunGraph(g, {}, {"grad:0"}, &out).ok());
  const std::vector<float> want = {0, 0, 1 + 3 + 4, 10 + 30 + 40, 0, 0, 2, 20};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(out[0].data<float>()[j], want[j]) << j;
}

TEST(EmbeddingKernelTest, EmptyIdsGiveEmptyRowsAndAZeroGradient) {
  Graph g;
  GraphBuilder b(&g);
  Output io = b.Placeholder(DType::kFloat32, {-1, 4}, "ids");
  Output params = b.Const(RandomTensor({3, 2}, 1));
  Node* e = b.AddNode("Embedding", {params, io}, {}, "emb");
  ASSERT_NE(e, nullptr) << b.status();
  b.AddNode("EmbeddingGrad", {io, Output(e, 0), params}, {}, "grad");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> out;
  absl::Status s = RunGraph(g, {{"ids", Tensor(DType::kFloat32, {0, 4})}}, {"emb:0", "grad:0"}, &out);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out[0].shape(), TensorShape({0, 4, 2}));
  ASSERT_EQ(out[1].shape(), TensorShape({3, 2}));
  for (int j = 0; j < 6; ++j) EXPECT_EQ(out[1].data<float>()[j], 0.0f) << j;
}

TEST(EmbeddingKernelTest, BadIdsAreRefusedWithTheirPositionAndValue) {
  struct Case {
    Tensor ids;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{
           {FloatTensor({2, 3}, {0, 1, 2, 3, 5, 1}), "ids[1,1] (flat index 4) is 5: an id must be a whole number in "
                                                     "[0, 5) (a row of params)"},
           {FloatTensor({2, 3}, {0, 1, 2, 3, 4, -1}), "ids[1,2] (flat index 5) is -1"},
           {FloatTensor({3}, {0, 2.5f, 1}), "ids[1] (flat index 1) is 2.5"},
           {FloatTensor({3}, {0, 1, NAN}), "ids[2] (flat index 2) is nan"},
           {IntTensor({2, 2}, {0, 1, 7, 2}), "ids[1,0] (flat index 2) is 7: an id must be a whole number in [0, 5)"},
           {IntTensor({1}, {-3}), "ids[0] (flat index 0) is -3"},
       }) {
    for (bool grad : {false, true}) {
      Graph g;
      GraphBuilder b(&g);
      Output ids = b.Const(c.ids);
      Output params = b.Const(RandomTensor({5, 2}, 1));
      if (grad) {
        b.AddNode("EmbeddingGrad", {ids, b.Const(RandomTensor(WithRow(c.ids.shape(), 2), 2)), params}, {}, "op");
      } else {
        b.AddNode("Embedding", {params, ids}, {}, "op");
      }
      ASSERT_TRUE(b.status().ok()) << b.status();
      std::vector<Tensor> out;
      absl::Status s = RunGraph(g, {}, {"op:0"}, &out);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_TRUE(StatusHas(s, c.want)) << c.want << " in " << s;
    }
  }
}

TEST(EmbeddingShapeTest, InfersRowsOfIdsAndRefusesBadOperandsByNodeName) {
  Graph g;
  GraphBuilder b(&g);
  Output params = b.Placeholder(DType::kFloat32, {50, 8}, "params");
  Node* e = b.AddNode("Embedding", {params, b.Placeholder(DType::kFloat32, {-1, 16}, "ids")}, {}, "emb");
  ASSERT_NE(e, nullptr) << b.status();
  EXPECT_EQ(e->output_shape(0), TensorShape({-1, 16, 8}));
  Node* gr = b.AddNode("EmbeddingGrad",
                       {b.Placeholder(DType::kInt32, {4}, "ids32"), b.Placeholder(DType::kFloat32, {-1, -1}, "g"),
                        params},
                       {}, "emb_grad");
  ASSERT_NE(gr, nullptr) << b.status();
  EXPECT_EQ(gr->output_shape(0), TensorShape({50, 8}));

  struct Case {
    const char* op;
    std::vector<std::pair<DType, TensorShape>> inputs;
    std::vector<std::string> want;
  };
  const DType f = DType::kFloat32, i32 = DType::kInt32;
  for (const Case& c : std::vector<Case>{
           {"Embedding", {{f, {50}}, {f, {4}}}, {"bad", "Embedding", "params [rows, width] must have rank 2"}},
           {"Embedding", {{i32, {50, 8}}, {f, {4}}}, {"params must be float32"}},
           {"Embedding", {{f, {50, 8}}, {f, {}}}, {"bad", "ids must have rank >= 1"}},
           {"Embedding", {{f, {50, 8}}, {DType::kInt64, {4}}}, {"ids must be float32 or int32"}},
           {"EmbeddingGrad", {{f, {4, 3}}, {f, {4, 3, 7}}, {f, {50, 8}}}, {"bad", "EmbeddingGrad", "g [4,3,7]"}},
           {"EmbeddingGrad", {{f, {4, 3}}, {f, {4, 8}}, {f, {50, 8}}}, {"must be ids' shape [4,3]"}},
           {"EmbeddingGrad", {{f, {4}}, {i32, {4, 8}}, {f, {50, 8}}}, {"g must be float32"}},
       }) {
    Graph gc;
    GraphBuilder bc(&gc);
    std::vector<Output> in;
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      in.push_back(bc.Placeholder(c.inputs[k].first, c.inputs[k].second, "in" + std::to_string(k)));
    }
    bc.AddNode(c.op, in, {}, "bad");
    ASSERT_FALSE(bc.status().ok()) << c.want[0];
    EXPECT_EQ(bc.status().code(), absl::StatusCode::kInvalidArgument) << bc.status();
    for (const std::string& w : c.want) EXPECT_TRUE(StatusHas(bc.status(), w)) << w << " in " << bc.status();
  }
}

// Shapes hidden from inference: the kernels refuse what the shape functions would.
TEST(EmbeddingKernelTest, KernelsRefuseWhatInferenceCouldNotSee) {
  Graph g;
  GraphBuilder b(&g);
  Output params = b.Placeholder(DType::kFloat32, {-1, -1}, "params");
  Output ids = b.Placeholder(DType::kFloat32, {-1, -1}, "ids");
  Output grad = b.Placeholder(DType::kFloat32, {-1, -1, -1}, "g");
  b.AddNode("Embedding", {params, ids}, {}, "emb");
  b.AddNode("EmbeddingGrad", {ids, grad, params}, {}, "grad");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> out;
  absl::Status s = RunGraph(g, {{"params", RandomTensor({3, 2}, 1)}, {"ids", FloatTensor({1, 2}, {0, 1})},
                                {"g", RandomTensor({1, 2, 3}, 2)}},
                            {"grad:0"}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(StatusHas(s, "g [1,2,3] must be ids' shape [1,2] and a row of params [3,2]: [1,2,2]")) << s;
}

TEST(EmbeddingGradientTest, OnlyParamsCarriesAGradient) {
  Graph g;
  GraphBuilder b(&g);
  Output params = b.Placeholder(DType::kFloat32, {6, 3}, "params");
  Output ids = b.Placeholder(DType::kFloat32, {2, 4}, "ids");
  Node* e = b.AddNode("Embedding", {params, ids}, {}, "emb");
  ASSERT_NE(e, nullptr) << b.status();
  auto to_params = AddGradients(&b, ops::Sum(&b, Output(e, 0)), {params});
  ASSERT_TRUE(to_params.ok()) << to_params.status();
  EXPECT_EQ((*to_params)[0].node->op(), "EmbeddingGrad");
  EXPECT_EQ((*to_params)[0].shape(), TensorShape({6, 3}));
  EXPECT_FALSE(AddGradients(&b, ops::Sum(&b, Output(e, 0)), {ids}).ok());
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// EmbeddingGradRows then ScatterRows (what a worker sends a parameter
// server, and what the server makes of it) against EmbeddingGrad: the same
// table gradient, bit for bit, from the distinct ids alone.
TEST(EmbeddingRowsTest, TouchedRowsScatterBackToTheDenseGradientBitForBit) {
  for (DType dtype : {DType::kFloat32, DType::kInt32}) {
    for (const TensorShape& shape : std::vector<TensorShape>{{0}, {7}, {4, 9}, {3, 5, 2}}) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), shape.DebugString()));
      const int64_t rows = 11, width = 5;
      Tensor ids = RandomIds(shape, rows, dtype, 4);
      Tensor grad = RandomTensor(WithRow(shape, width), 5);
      Graph g;
      GraphBuilder b(&g);
      Output po = b.Placeholder(DType::kFloat32, {rows, width}, "params");
      Output io = b.Placeholder(dtype, shape, "ids");
      Output go = b.Placeholder(DType::kFloat32, WithRow(shape, width), "g");
      b.AddNode("EmbeddingGrad", {io, go, po}, {}, "dense");
      Node* touched = b.AddNode("EmbeddingGradRows", {io, go}, {Attr("num_rows", rows)}, "rows");
      b.AddNode("ScatterRows", {Output(touched, 0), Output(touched, 1), po}, {}, "scattered");
      ASSERT_TRUE(b.status().ok()) << b.status();
      std::vector<Tensor> out;
      ASSERT_TRUE(RunGraph(g, {{"params", RandomTensor({rows, width}, 6)}, {"ids", ids}, {"g", grad}},
                           {"dense", "rows:0", "rows:1", "scattered"}, &out)
                      .ok());
      EXPECT_EQ(std::memcmp(out[0].raw_data(), out[3].raw_data(), out[0].TotalBytes()), 0);
      // The rows are the distinct ids in order of first appearance.
      std::vector<int32_t> want;
      for (int64_t i = 0; i < ids.NumElements(); ++i) {
        const int32_t id = static_cast<int32_t>(IdAt(ids, i));
        if (std::find(want.begin(), want.end(), id) == want.end()) want.push_back(id);
      }
      ASSERT_EQ(out[1].NumElements(), static_cast<int64_t>(want.size()));
      for (size_t u = 0; u < want.size(); ++u) EXPECT_EQ(out[1].data<int32_t>()[u], want[u]) << u;
      EXPECT_EQ(out[2].shape(), (TensorShape{static_cast<int64_t>(want.size()), width}));
    }
  }
}

// One kernel over several steps: the slots it keeps between calls start
// every step clean, so each step's rows are its own ids alone.
TEST(EmbeddingRowsTest, EachStepOfOneKernelSeesOnlyItsOwnIds) {
  const int64_t rows = 9, width = 3;
  Graph g;
  GraphBuilder b(&g);
  Output io = b.Placeholder(DType::kInt32, {-1}, "ids");
  Output go = b.Placeholder(DType::kFloat32, {-1, width}, "g");
  Node* touched = b.AddNode("EmbeddingGradRows", {io, go}, {Attr("num_rows", rows)}, "rows");
  ASSERT_TRUE(b.status().ok()) << b.status();
  CpuDevice cpu("/device:CPU:0", 1);
  ExecutorOptions opts;
  opts.feeds = {"ids", "g"};
  opts.fetches = {Output(touched, 0).name(), Output(touched, 1).name()};
  auto exec = Executor::Create(&g, &cpu, opts);
  ASSERT_TRUE(exec.ok()) << exec.status();
  const std::vector<std::vector<int32_t>> steps = {{4, 1, 4, 8}, {2, 2}, {8, 0, 1}};
  for (size_t s = 0; s < steps.size(); ++s) {
    const std::vector<int32_t>& ids = steps[s];
    const int64_t n = static_cast<int64_t>(ids.size());
    Tensor grad = RandomTensor({n, width}, 10 + s);
    std::vector<Tensor> out;
    ASSERT_TRUE((*exec)->Run({IntTensor({n}, ids), grad}, &out, static_cast<int64_t>(s)).ok());
    std::vector<int32_t> want;
    for (int32_t id : ids) {
      if (std::find(want.begin(), want.end(), id) == want.end()) want.push_back(id);
    }
    ASSERT_EQ(out[0].NumElements(), static_cast<int64_t>(want.size())) << "step " << s;
    for (size_t u = 0; u < want.size(); ++u) {
      EXPECT_EQ(out[0].data<int32_t>()[u], want[u]) << "step " << s;
      for (int64_t c = 0; c < width; ++c) {
        float sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += ids[i] == want[u] ? grad.data<float>()[i * width + c] : 0.0f;
        EXPECT_EQ(out[1].data<float>()[u * width + c], sum) << "step " << s << " row " << want[u];
      }
    }
  }
}

TEST(EmbeddingRowsTest, RowsOutsideTheTableAreRefusedByPosition) {
  Graph g;
  GraphBuilder b(&g);
  Output ids = b.Placeholder(DType::kFloat32, {3}, "ids");
  Output grad = b.Placeholder(DType::kFloat32, {3, 2}, "g");
  b.AddNode("EmbeddingGradRows", {ids, grad}, {Attr("num_rows", int64_t{4})}, "rows");
  Output rows = b.Placeholder(DType::kInt32, {2}, "r");
  Output values = b.Placeholder(DType::kFloat32, {2, 2}, "v");
  b.AddNode("ScatterRows", {rows, values, b.Placeholder(DType::kFloat32, {4, 2}, "like")}, {}, "scattered");
  ASSERT_TRUE(b.status().ok()) << b.status();
  std::vector<Tensor> out;
  absl::Status s = RunGraph(g, {{"ids", FloatTensor({3}, {1, 4, 0})}, {"g", RandomTensor({3, 2}, 1)}}, {"rows:0"},
                            &out);
  EXPECT_TRUE(StatusHas(s, "ids[1]")) << s;
  s = RunGraph(g, {{"r", IntTensor({2}, {3, -1})}, {"v", RandomTensor({2, 2}, 1)}, {"like", RandomTensor({4, 2}, 2)}},
               {"scattered"}, &out);
  EXPECT_TRUE(StatusHas(s, "rows[1] is -1, outside [0, 4)")) << s;
  // Shapes that disagree are refused when the graph is built, naming the node.
  Graph g2;
  GraphBuilder b2(&g2);
  b2.AddNode("ScatterRows",
             {b2.Placeholder(DType::kInt32, {2}, "r"), b2.Placeholder(DType::kFloat32, {3, 2}, "v"),
              b2.Placeholder(DType::kFloat32, {4, 2}, "like")},
             {}, "bad_scatter");
  EXPECT_TRUE(StatusHas(b2.status(), "bad_scatter")) << b2.status();
  EXPECT_TRUE(StatusHas(b2.status(), "must have a row per entry of rows")) << b2.status();
}

}  // namespace
}  // namespace weft
