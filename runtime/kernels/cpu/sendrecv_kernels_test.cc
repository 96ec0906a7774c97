#include <thread>

#include "common/test_util.h"
#include "common/thread_pool.h"
#include "graph/builder.h"
#include "graph/partition.h"
#include "gtest/gtest.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/rendezvous.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace {

constexpr char kA[] = "/job:worker/task:0/device:CPU:0";
constexpr char kB[] = "/job:worker/task:0/device:CPU:1";

AttrList RecvAttrs(const std::string& tensor_name, const TensorShape& shape) {
  return {Attr("tensor_name", tensor_name), Attr("send_device", kA), Attr("recv_device", kB),
          Attr("tensor_type", DType::kFloat32), Attr("shape", shape)};
}

AttrList SendAttrs(const std::string& tensor_name) {
  return {Attr("tensor_name", tensor_name), Attr("send_device", kA), Attr("recv_device", kB)};
}

class SendRecvTest : public ::testing::Test {
 protected:
  CpuDevice device_a_{kA, 1};
  CpuDevice device_b_{kB, 1};
  ThreadPool pool_{"inter_op", 2};
};

// x -> Relu on A; _Send/_Recv; Add(recv, recv) on B: two executors, one
// rendezvous, the same answer as the unpartitioned graph.
TEST_F(SendRecvTest, CarriesATensorBetweenPartitions) {
  Graph ga, gb;
  GraphBuilder a(&ga), b(&gb);
  Output x = a.Placeholder(DType::kFloat32, {2, 2}, "x");
  Output relu = a.Op("Relu", {x}, {}, "relu");
  a.AddNode("_Send", {relu}, SendAttrs("relu:0"), "send");
  Output recv = b.Op("_Recv", {}, RecvAttrs("relu:0", {2, -1}), "recv");
  b.Op("Add", {recv, recv}, {}, "sum");
  ASSERT_TRUE(a.status().ok()) << a.status();
  ASSERT_TRUE(b.status().ok()) << b.status();

  ExecutorOptions oa;
  oa.feeds = {"x"};
  oa.targets = {"send"};
  auto ea = Executor::Create(&ga, &device_a_, oa);
  ExecutorOptions ob;
  ob.fetches = {"sum"};
  auto eb = Executor::Create(&gb, &device_b_, ob);
  ASSERT_TRUE(ea.ok()) << ea.status();
  ASSERT_TRUE(eb.ok()) << eb.status();

  LocalRendezvous r;
  for (int64_t step = 1; step <= 2; ++step) {  // keys differ by step id
    std::vector<Tensor> out;
    absl::Status sb;
    std::thread tb([&] { sb = (*eb)->Run({}, &out, step, &r); });  // receiver first: it must wait
    Tensor xv = testing::FloatTensor({2, 2}, {-1, 2, 3, -4});
    ASSERT_TRUE((*ea)->Run({xv}, nullptr, step, &r).ok());
    tb.join();
    ASSERT_TRUE(sb.ok()) << sb;
    EXPECT_EQ(testing::MaxAbsDiff(out[0], testing::FloatTensor({2, 2}, {0, 4, 6, 0})), 0.0);
  }
  EXPECT_EQ(r.NumPending(), 0);
}

// A sends x to B and receives B's answer: a round trip. Both partitions run
// inline (no pool), each on one thread; a _Recv that blocked its thread could
// stall A before its _Send ran, an async _Recv cannot.
TEST_F(SendRecvTest, RoundTripRunsInlineWithoutAPool) {
  constexpr char kBack[] = "neg:0";
  Graph ga, gb;
  GraphBuilder a(&ga), b(&gb);
  // A's _Recv comes first, so it is a root processed before the _Send.
  Output back = a.Op("_Recv", {}, {Attr("tensor_name", kBack), Attr("send_device", kB), Attr("recv_device", kA),
                                   Attr("tensor_type", DType::kFloat32), Attr("shape", TensorShape{2})},
                     "recv_back");
  Output x = a.Placeholder(DType::kFloat32, {2}, "x");
  a.AddNode("_Send", {x}, SendAttrs("x:0"), "send_x");
  a.Op("Add", {back, x}, {}, "sum");
  Output got = b.Op("_Recv", {}, RecvAttrs("x:0", {2}), "recv_x");
  Output neg = b.Op("Neg", {got}, {}, "neg");
  b.AddNode("_Send", {neg}, {Attr("tensor_name", kBack), Attr("send_device", kB), Attr("recv_device", kA)},
            "send_back");
  ASSERT_TRUE(a.status().ok()) << a.status();
  ASSERT_TRUE(b.status().ok()) << b.status();
  auto ea = Executor::Create(&ga, &device_a_, ExecutorOptions{.feeds = {"x"}, .fetches = {"sum"}, .targets = {"send_x"}});
  auto eb = Executor::Create(&gb, &device_b_, ExecutorOptions{.targets = {"send_back"}});
  ASSERT_TRUE(ea.ok()) << ea.status();
  ASSERT_TRUE(eb.ok()) << eb.status();
  LocalRendezvous r;
  absl::Status sb;
  std::thread tb([&] { sb = (*eb)->Run({}, nullptr, 4, &r); });
  std::vector<Tensor> out;
  absl::Status sa = (*ea)->Run({testing::FloatTensor({2}, {1, 2})}, &out, 4, &r);
  tb.join();
  ASSERT_TRUE(sa.ok()) << sa;
  ASSERT_TRUE(sb.ok()) << sb;
  EXPECT_EQ(testing::MaxAbsDiff(out[0], testing::FloatTensor({2}, {0, 0})), 0.0);
}

TEST_F(SendRecvTest, WithoutARendezvousIsFailedPrecondition) {
  Graph g;
  GraphBuilder b(&g);
  b.Op("_Recv", {}, RecvAttrs("t", {1}), "recv");
  ASSERT_TRUE(b.status().ok());
  auto out = RunGraphOnce(g, &device_b_, {}, {"recv"});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition) << out.status();
  EXPECT_NE(out.status().message().find("'recv' (_Recv)"), absl::string_view::npos) << out.status();
}

TEST_F(SendRecvTest, WrongDtypeIsRejectedNamingTheTensor) {
  Graph g;
  GraphBuilder b(&g);
  b.Op("_Recv", {}, RecvAttrs("t:0", {1}), "recv");
  ASSERT_TRUE(b.status().ok());
  auto e = Executor::Create(&g, &device_b_, ExecutorOptions{.fetches = {"recv"}});
  ASSERT_TRUE(e.ok());
  LocalRendezvous r;
  ASSERT_TRUE(r.Send(RendezvousKey(kA, 0, kB, "t:0", 9), Tensor::Scalar<int32_t>(1), false).ok());
  std::vector<Tensor> out;
  absl::Status s = (*e)->Run({}, &out, 9, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("'t:0'"), absl::string_view::npos) << s;
}

TEST_F(SendRecvTest, AbortWakesABlockedRecv) {
  Graph g;
  GraphBuilder b(&g);
  b.Op("_Recv", {}, RecvAttrs("never_sent", {1}), "recv");
  ASSERT_TRUE(b.status().ok());
  auto e = Executor::Create(&g, &device_b_, ExecutorOptions{.fetches = {"recv"}});
  ASSERT_TRUE(e.ok());
  LocalRendezvous r;
  absl::Status s;
  std::thread t([&] {
    std::vector<Tensor> out;
    s = (*e)->Run({}, &out, 1, &r);
  });
  const bool blocked = testing::WaitUntil(testing::kWaitTimeout, "the _Recv to wait in the rendezvous",
                                          [&]() -> absl::StatusOr<bool> { return r.NumPending() > 0; });
  EXPECT_TRUE(blocked);
  r.StartAbort(absl::AbortedError("step 1 aborted by the master"));
  t.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("aborted by the master"), absl::string_view::npos) << s;
}

// A failing node in the step aborts the step's rendezvous at once, so a _Recv
// of the same step (here waiting for a value no one will send) wakes with the
// failure instead of hanging the step.
TEST_F(SendRecvTest, KernelErrorAbortsTheRendezvous) {
  Graph g;
  GraphBuilder b(&g);
  Output recv = b.Op("_Recv", {}, RecvAttrs("never_sent", {2}), "recv");
  Output p = b.Placeholder(DType::kFloat32, {2}, "unfed");
  Output bad = b.Op("Relu", {p}, {}, "bad");
  b.Op("Add", {recv, bad}, {}, "sum");
  ASSERT_TRUE(b.status().ok()) << b.status();
  auto e = Executor::Create(&g, &device_b_, ExecutorOptions{.fetches = {"sum"}, .inter_op_pool = &pool_});
  ASSERT_TRUE(e.ok()) << e.status();
  LocalRendezvous r;
  std::vector<Tensor> out;
  absl::Status s = (*e)->Run({}, &out, 1, &r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("unfed"), absl::string_view::npos) << s;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
}

}  // namespace
}  // namespace weft
