// Conv2D (+backprops) and MaxPool (+grad) kernels against direct loops.
#include <algorithm>
#include <cmath>

#include "graph/builder.h"
#include "graph/ops/ops.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

using testing::DistinctTensor;
using testing::FloatTensor;
using testing::MaxAbsDiff;
using testing::RandomTensor;

// Output size and leading pad, computed here independently of the kernels.
void Window(int64_t in, int64_t k, int64_t s, bool same, int64_t* out, int64_t* pad) {
  if (same) {
    *out = (in + s - 1) / s;
    *pad = std::max<int64_t>((*out - 1) * s + k - in, 0) / 2;
  } else {
    *out = (in - k) / s + 1;
    *pad = 0;
  }
}

struct ConvCase {
  int64_t n, h, w, cin, kh, kw, cout, stride;
  bool same;
  int threads;
};

class ConvTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvTest, ForwardAndBackpropsMatchDirectLoops) {
  const ConvCase c = GetParam();
  int64_t ho, wo, pt, pl;
  Window(c.h, c.kh, c.stride, c.same, &ho, &pt);
  Window(c.w, c.kw, c.stride, c.same, &wo, &pl);
  Tensor x = RandomTensor({c.n, c.h, c.w, c.cin}, 1);
  Tensor f = RandomTensor({c.kh, c.kw, c.cin, c.cout}, 2);
  Tensor gr = RandomTensor({c.n, ho, wo, c.cout}, 3);
  Tensor y(DType::kFloat32, {c.n, ho, wo, c.cout});
  Tensor dx(DType::kFloat32, x.shape()), df(DType::kFloat32, f.shape());
  std::vector<double> y_acc(y.NumElements(), 0), dx_acc(dx.NumElements(), 0), df_acc(df.NumElements(), 0);
  auto xi = [&](int64_t n, int64_t i, int64_t j, int64_t ci) { return ((n * c.h + i) * c.w + j) * c.cin + ci; };
  auto fi = [&](int64_t a, int64_t b, int64_t ci, int64_t co) { return ((a * c.kw + b) * c.cin + ci) * c.cout + co; };
  auto yi = [&](int64_t n, int64_t i, int64_t j, int64_t co) { return ((n * ho + i) * wo + j) * c.cout + co; };
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t oh = 0; oh < ho; ++oh)
      for (int64_t ow = 0; ow < wo; ++ow)
        for (int64_t a = 0; a < c.kh; ++a)
          for (int64_t b = 0; b < c.kw; ++b) {
            const int64_t ih = oh * c.stride - pt + a, iw = ow * c.stride - pl + b;
            if (ih < 0 || ih >= c.h || iw < 0 || iw >= c.w) continue;
            for (int64_t ci = 0; ci < c.cin; ++ci)
              for (int64_t co = 0; co < c.cout; ++co) {
                const double xv = x.data<float>()[xi(n, ih, iw, ci)], fv = f.data<float>()[fi(a, b, ci, co)];
                const double gv = gr.data<float>()[yi(n, oh, ow, co)];
                y_acc[yi(n, oh, ow, co)] += xv * fv;
                dx_acc[xi(n, ih, iw, ci)] += gv * fv;
                df_acc[fi(a, b, ci, co)] += gv * xv;
              }
          }
  for (int64_t i = 0; i < y.NumElements(); ++i) y.data<float>()[i] = y_acc[i];
  for (int64_t i = 0; i < dx.NumElements(); ++i) dx.data<float>()[i] = dx_acc[i];
  for (int64_t i = 0; i < df.NumElements(); ++i) df.data<float>()[i] = df_acc[i];

  Graph g;
  GraphBuilder bld(&g);
  Output xo = bld.Placeholder(DType::kFloat32, {-1, c.h, c.w, c.cin}, "x");
  Output fo = bld.Placeholder(DType::kFloat32, f.shape(), "f");
  Output go = bld.Placeholder(DType::kFloat32, {-1, ho, wo, c.cout}, "g");
  const char* padding = c.same ? "SAME" : "VALID";
  Output yo = ops::Conv2D(&bld, xo, fo, c.stride, padding);
  Output dxo = ops::Conv2DBackpropInput(&bld, xo, fo, go, c.stride, padding);
  Output dfo = ops::Conv2DBackpropFilter(&bld, xo, fo, go, c.stride, padding);
  ASSERT_TRUE(bld.status().ok()) << bld.status();
  EXPECT_EQ(yo.shape(), (TensorShape{-1, ho, wo, c.cout}));
  CpuDevice device("/device:CPU:0", c.threads);
  auto r = RunGraphOnce(g, &device, {{"x", x}, {"f", f}, {"g", gr}}, {yo.name(), dxo.name(), dfo.name()});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(MaxAbsDiff((*r)[0], y), 1e-4);
  EXPECT_LT(MaxAbsDiff((*r)[1], dx), 1e-4);
  EXPECT_LT(MaxAbsDiff((*r)[2], df), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ConvTest,
    ::testing::Values(ConvCase{2, 7, 6, 3, 3, 3, 4, 1, false, 1},   // VALID stride 1
                      ConvCase{2, 7, 6, 3, 3, 3, 4, 2, true, 1},    // SAME stride 2, odd sizes
                      ConvCase{2, 8, 8, 2, 3, 3, 5, 2, true, 1},    // SAME stride 2, even sizes
                      ConvCase{3, 9, 7, 2, 2, 3, 3, 2, false, 1},   // VALID stride 2, non-square filter
                      ConvCase{2, 5, 5, 4, 1, 1, 3, 1, true, 1},    // pointwise fast path
                      ConvCase{2, 5, 5, 4, 1, 1, 3, 2, false, 1},   // 1x1 with stride: im2col path
                      ConvCase{2, 6, 6, 3, 5, 5, 2, 1, true, 1},    // padding wider than half the input
                      ConvCase{9, 28, 28, 2, 5, 5, 4, 1, true, 1},  // several chunks
                      ConvCase{9, 28, 28, 2, 5, 5, 4, 1, true, 3},  // chunks across threads
                      ConvCase{4, 5, 5, 4, 1, 1, 3, 1, false, 3}));

TEST(ConvKernelTest, ChannelMismatchAtRunTime) {
  Graph g;
  GraphBuilder b(&g);
  Output y = ops::Conv2D(&b, b.Placeholder(DType::kFloat32, {-1, -1, -1, -1}, "x"),
                         b.Placeholder(DType::kFloat32, {3, 3, 2, 4}, "f"), 1, "SAME", "conv");
  CpuDevice device("/device:CPU:0", 1);
  auto r = RunGraphOnce(g, &device, {{"x", RandomTensor({1, 5, 5, 3}, 1)}, {"f", RandomTensor({3, 3, 2, 4}, 2)}},
                        {y.name()});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("conv"), std::string::npos) << r.status();
  EXPECT_NE(r.status().message().find("[1,5,5,3] has 3 channels but filter [3,3,2,4] expects 2"), std::string::npos)
      << r.status();
}

struct PoolCase {
  int64_t n, h, w, c, k, stride;
  bool same;
};

class MaxPoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(MaxPoolTest, ForwardAndGradMatchDirectLoops) {
  const PoolCase p = GetParam();
  int64_t ho, wo, pt, pl;
  Window(p.h, p.k, p.stride, p.same, &ho, &pt);
  Window(p.w, p.k, p.stride, p.same, &wo, &pl);
  Tensor x = DistinctTensor({p.n, p.h, p.w, p.c}, 4);
  Tensor gr = RandomTensor({p.n, ho, wo, p.c}, 5);
  Tensor y(DType::kFloat32, {p.n, ho, wo, p.c});
  Tensor dx = RandomTensor(x.shape(), 0);
  std::fill(dx.data<float>(), dx.data<float>() + dx.NumElements(), 0.0f);
  for (int64_t n = 0; n < p.n; ++n)
    for (int64_t oh = 0; oh < ho; ++oh)
      for (int64_t ow = 0; ow < wo; ++ow)
        for (int64_t ch = 0; ch < p.c; ++ch) {
          float best = -INFINITY;
          int64_t arg = -1;
          for (int64_t a = 0; a < p.k; ++a)
            for (int64_t b = 0; b < p.k; ++b) {
              const int64_t ih = oh * p.stride - pt + a, iw = ow * p.stride - pl + b;
              if (ih < 0 || ih >= p.h || iw < 0 || iw >= p.w) continue;
              const int64_t idx = ((n * p.h + ih) * p.w + iw) * p.c + ch;
              if (arg < 0 || x.data<float>()[idx] > best) {
                best = x.data<float>()[idx];
                arg = idx;
              }
            }
          const int64_t oi = ((n * ho + oh) * wo + ow) * p.c + ch;
          y.data<float>()[oi] = best;
          dx.data<float>()[arg] += gr.data<float>()[oi];
        }
  Graph g;
  GraphBuilder bld(&g);
  Output xo = bld.Placeholder(DType::kFloat32, {-1, p.h, p.w, p.c}, "x");
  Output yo = ops::MaxPool(&bld, xo, p.k, p.stride, p.same ? "SAME" : "VALID");
  Output dxo = bld.Op("MaxPoolGrad", {xo, yo, bld.Placeholder(DType::kFloat32, {-1, ho, wo, p.c}, "g")},
                      {Attr("ksize", p.k), Attr("stride", p.stride), Attr("padding", p.same ? "SAME" : "VALID")});
  ASSERT_TRUE(bld.status().ok()) << bld.status();
  EXPECT_EQ(yo.shape(), (TensorShape{-1, ho, wo, p.c}));
  CpuDevice device("/device:CPU:0", 1);
  auto r = RunGraphOnce(g, &device, {{"x", x}, {"g", gr}}, {yo.name(), dxo.name()});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(MaxAbsDiff((*r)[0], y), 0);
  EXPECT_LT(MaxAbsDiff((*r)[1], dx), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MaxPoolTest,
                         ::testing::Values(PoolCase{2, 6, 7, 3, 2, 2, false},   // VALID, drops the last column
                                           PoolCase{2, 7, 7, 3, 3, 2, true},    // SAME, overlapping windows
                                           PoolCase{1, 5, 5, 2, 2, 2, true},    // SAME, padded edge
                                           PoolCase{2, 6, 6, 4, 3, 1, true},    // SAME stride 1
                                           PoolCase{1, 8, 8, 5, 3, 3, false})); // VALID, stride == ksize

TEST(MaxPoolKernelTest, TiesRouteToTheFirstMaximum) {
  Graph g;
  GraphBuilder b(&g);
  Output x = b.Placeholder(DType::kFloat32, {1, 2, 2, 1}, "x");
  Output y = ops::MaxPool(&b, x, 2);
  Output dx = b.Op("MaxPoolGrad", {x, y, b.Placeholder(DType::kFloat32, {1, 1, 1, 1}, "g")}, {Attr("ksize", 2)});
  ASSERT_TRUE(b.status().ok()) << b.status();
  CpuDevice device("/device:CPU:0", 1);
  auto r = RunGraphOnce(g, &device,
                        {{"x", FloatTensor({1, 2, 2, 1}, {1, 3, 3, 3})}, {"g", FloatTensor({1, 1, 1, 1}, {5})}},
                        {dx.name()});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(MaxAbsDiff((*r)[0], FloatTensor({1, 2, 2, 1}, {0, 5, 0, 0})), 0);
}

}  // namespace
}  // namespace weft
