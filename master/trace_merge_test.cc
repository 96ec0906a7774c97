#include "master/trace_merge.h"

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace weft {
namespace master {
namespace {

// A call sent at master time 1000 that took 100 us each way and 800 us on a
// task whose clock runs `offset` ahead of the master's.
TracedCall Call(const std::string& task, int64_t offset) {
  TracedCall c;
  c.task = task;
  c.step_id = 7;
  c.sent_us = 1000;
  c.answered_us = 2000;
  c.trace.set_received_us(1100 + offset);
  c.trace.set_replied_us(1900 + offset);
  TraceSpan* s = c.trace.add_span();
  s->set_name("dense/MatMul");
  s->set_op("MatMul");
  s->set_device(task + "/device:CPU:0");
  s->set_thread(3);
  s->set_start_us(1200 + offset);
  s->set_end_us(1500 + offset);
  s->set_step_id(7);
  return c;
}

TEST(TraceMerge, OffsetIsTheNtpEstimate) {
  EXPECT_EQ(ClockOffsetMicros(Call("/job:worker/task:0", 0)), 0);
  EXPECT_EQ(ClockOffsetMicros(Call("/job:worker/task:0", 123456789)), 123456789);
  EXPECT_EQ(ClockOffsetMicros(Call("/job:worker/task:0", -5000)), -5000);
  // Asymmetric delays: off by half the difference, never more than the
  // round trip.
  TracedCall c = Call("/job:worker/task:0", 0);
  c.trace.set_received_us(1300);  // 300 us out, 100 us back
  EXPECT_EQ(ClockOffsetMicros(c), 100);
}

TEST(TraceMerge, SpansLandOnTheMastersClockInOneDocument) {
  std::vector<TracedCall> calls = {Call("/job:worker/task:0", 0), Call("/job:worker/task:1", 987654321)};
  int spans = 0;
  const std::string json = ChromeTraceJson(calls, &spans);
  EXPECT_EQ(spans, 2);
  google::protobuf::Struct doc;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &doc).ok()) << json;
  const auto& events = doc.fields().at("traceEvents").list_value().values();
  int kernels = 0, dispatch = 0, processes = 0;
  for (const auto& e : events) {
    const auto& f = e.struct_value().fields();
    const std::string ph = f.at("ph").string_value();
    if (ph == "M" && f.at("name").string_value() == "process_name") ++processes;
    if (ph != "X") continue;
    if (f.at("cat").string_value() == "kernel") {
      ++kernels;
      // Both tasks' MatMul ran 200..500 us after the first send, whatever
      // their clocks said.
      EXPECT_EQ(f.at("ts").number_value(), 200) << json;
      EXPECT_EQ(f.at("dur").number_value(), 300);
      EXPECT_EQ(f.at("args").struct_value().fields().at("op").string_value(), "MatMul");
      EXPECT_EQ(f.at("args").struct_value().fields().at("step").number_value(), 7);
    } else {
      ++dispatch;
      EXPECT_EQ(f.at("ts").number_value(), 0);
      EXPECT_EQ(f.at("dur").number_value(), 1000);
    }
  }
  EXPECT_EQ(kernels, 2);
  EXPECT_EQ(dispatch, 2);
  EXPECT_EQ(processes, 3);  // the master and two tasks
}

TEST(TraceMerge, EmptyIsAValidDocument) {
  google::protobuf::Struct doc;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ChromeTraceJson({}), &doc).ok());
}

}  // namespace
}  // namespace master
}  // namespace weft
