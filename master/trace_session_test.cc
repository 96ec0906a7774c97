// `weft trace` through a real MasterSession over in-process tasks: every
// kernel of every traced step of every task comes back, inside its
// RunGraph call, consumers after their producers, on one clock.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/builder.h"
#include "gtest/gtest.h"
#include "master/in_process_cluster.h"
#include "master/master_session.h"
#include "master/trace_merge.h"
#include "runtime/testing/test_util.h"

namespace weft {
namespace master {
namespace {

constexpr char kW0[] = "/job:worker/task:0";
constexpr char kW1[] = "/job:worker/task:1";

// x -> MatMul (worker 0) -> Relu -> Neg (worker 1): a cut edge, so a
// _Send on worker 0 and a _Recv on worker 1.
GraphDef TwoTaskGraph() {
  Graph g;
  GraphBuilder b(&g);
  b.set_device(kW0);
  Output x = b.Placeholder(DType::kFloat32, {-1, 3}, "x");
  Output w = b.Variable("w", DType::kFloat32, {3, 4}, "glorot_uniform", 5);
  Output y = b.Op("MatMul", {x, w}, {}, "y");
  b.set_device(kW1);
  Output r = b.Op("Relu", {y}, {}, "r");
  b.Op("Neg", {r}, {}, "out");
  EXPECT_TRUE(b.status().ok()) << b.status();
  return g.ToGraphDef();
}

TEST(TraceSessionTest, EveryKernelOfEveryTracedStepOnEveryTask) {
  auto cluster = InProcessCluster::Create({kW0, kW1});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto s = MasterSession::Create("s", TwoTaskGraph(), (*cluster)->workers());
  ASSERT_TRUE(s.ok()) << s.status();
  const Tensor x = testing::RandomTensor({5, 3}, 11);
  std::vector<Tensor> out;
  ASSERT_TRUE((*s)->Run({{"x", x}}, {"out"}, {}, &out).ok());  // untraced

  auto collector = std::make_shared<TraceCollector>(2);
  (*s)->SetTrace(collector);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*s)->Run({{"x", x}}, {"out"}, {}, &out).ok());
  ASSERT_TRUE(collector->Wait(absl::Seconds(10)));
  int steps = 0;
  std::vector<TracedCall> calls = collector->Calls(&steps);
  EXPECT_EQ(steps, 2) << "the third step is not traced";
  ASSERT_EQ(calls.size(), 4u) << "two tasks, two steps";

  std::set<int64_t> step_ids;
  std::map<std::string, std::set<std::string>> ops_by_task;
  std::map<std::string, std::set<std::set<std::string>>> names_by_task;  // one set per step
  for (const TracedCall& c : calls) {
    step_ids.insert(c.step_id);
    const int64_t offset = ClockOffsetMicros(c);
    ASSERT_GT(c.trace.received_us(), 0);
    std::map<std::string, const TraceSpan*> by_name;
    const TraceSpan* run = nullptr;
    for (const TraceSpan& span : c.trace.span()) {
      EXPECT_EQ(span.step_id(), c.step_id);
      EXPECT_LE(span.start_us(), span.end_us()) << span.name();
      if (span.op() == "RunGraph") {
        run = &span;
        continue;
      }
      ops_by_task[c.task].insert(span.op());
      EXPECT_TRUE(by_name.emplace(span.name(), &span).second) << span.name() << " ran twice in one step";
      // On the master's clock, within the call the master made.
      EXPECT_GE(span.start_us() - offset, c.sent_us - (c.answered_us - c.sent_us)) << span.name();
      EXPECT_LE(span.end_us() - offset, c.answered_us + (c.answered_us - c.sent_us)) << span.name();
    }
    ASSERT_NE(run, nullptr) << c.task;
    std::set<std::string> names;
    for (const auto& [name, span] : by_name) names.insert(name);
    names_by_task[c.task].insert(names);
    for (const auto& [name, span] : by_name) {
      EXPECT_GE(span->start_us(), run->start_us()) << name;
      EXPECT_LE(span->end_us(), run->end_us()) << name;
    }
    if (c.task == kW0) {
      ASSERT_TRUE(by_name.count("y") && by_name.count("w"));  // x is fed: it does not run
      EXPECT_GE(by_name["y"]->start_us(), by_name["w"]->end_us()) << "MatMul after its variable";
    } else {
      ASSERT_TRUE(by_name.count("r") && by_name.count("out"));
      EXPECT_GE(by_name["out"]->start_us(), by_name["r"]->end_us()) << "Neg after Relu";
    }
  }
  EXPECT_EQ(step_ids.size(), 2u);
  // Both steps ran the same kernels on each task.
  EXPECT_EQ(names_by_task[kW0].size(), 1u);
  EXPECT_EQ(names_by_task[kW1].size(), 1u);
  EXPECT_TRUE(ops_by_task[kW0].count("MatMul") && ops_by_task[kW0].count("_Send")) << ops_by_task[kW0].size();
  EXPECT_TRUE(ops_by_task[kW1].count("_Recv") && ops_by_task[kW1].count("Relu") &&
              ops_by_task[kW1].count("Neg"));

  // Merged: one document with spans of both tasks.
  int spans = 0;
  const std::string json = ChromeTraceJson(calls, &spans);
  EXPECT_GE(spans, 8);
  EXPECT_NE(json.find("\"name\":\"/job:worker/task:1\""), std::string::npos);
}

TEST(TraceSessionTest, UntracedStepsCarryNoTrace) {
  auto cluster = InProcessCluster::Create({kW0, kW1});
  ASSERT_TRUE(cluster.ok());
  auto s = MasterSession::Create("s", TwoTaskGraph(), (*cluster)->workers());
  ASSERT_TRUE(s.ok());
  auto collector = std::make_shared<TraceCollector>(1);
  std::vector<Tensor> out;
  ASSERT_TRUE((*s)->Run({{"x", testing::RandomTensor({2, 3}, 1)}}, {"out"}, {}, &out).ok());
  EXPECT_FALSE(collector->Wait(absl::ZeroDuration())) << "nothing was armed";
}

}  // namespace
}  // namespace master
}  // namespace weft
