#include "graph/device_name.h"

#include "gtest/gtest.h"

namespace weft {
namespace {

DeviceName P(const std::string& s) {
  auto d = DeviceName::Parse(s);
  EXPECT_TRUE(d.ok()) << s << ": " << d.status();
  return d.ok() ? *d : DeviceName{};
}

TEST(DeviceNameTest, FullNameRoundTrips) {
  const DeviceName d = P("/job:ps/task:3/device:CPU:1");
  EXPECT_EQ(d.job, "ps");
  EXPECT_EQ(d.task, 3);
  EXPECT_EQ(d.type, "CPU");
  EXPECT_EQ(d.id, 1);
  EXPECT_TRUE(d.IsFullySpecified());
  EXPECT_EQ(d.ToString(), "/job:ps/task:3/device:CPU:1");
  EXPECT_EQ(P(d.ToString()), d);
}

TEST(DeviceNameTest, PartialNames) {
  const DeviceName job = P("/job:worker");
  EXPECT_EQ(job.job, "worker");
  EXPECT_EQ(job.task, -1);
  EXPECT_TRUE(job.type.empty());
  EXPECT_FALSE(job.IsFullySpecified());
  EXPECT_EQ(job.ToString(), "/job:worker");

  const DeviceName dev = P("/device:CPU:1");
  EXPECT_TRUE(dev.job.empty());
  EXPECT_EQ(dev.type, "CPU");
  EXPECT_EQ(dev.id, 1);
  EXPECT_EQ(dev.ToString(), "/device:CPU:1");

  EXPECT_EQ(P("/job:worker/task:1").ToString(), "/job:worker/task:1");
  EXPECT_EQ(P("/device:GPU:*").ToString(), "/device:GPU:*");
  EXPECT_EQ(P("/device:GPU:*").id, -1);

  const DeviceName empty = P("");
  EXPECT_TRUE(empty.IsEmpty());
  EXPECT_EQ(empty.ToString(), "");
}

TEST(DeviceNameTest, ShorthandAndOrderAreCanonicalised) {
  EXPECT_EQ(P("/cpu:0").ToString(), "/device:CPU:0");
  EXPECT_EQ(P("/job:worker/replica:0/task:1/gpu:2").ToString(), "/job:worker/task:1/device:GPU:2");
  EXPECT_EQ(P("/device:cpu:0"), P("/CPU:0"));
  EXPECT_EQ(P("/task:1/job:w").ToString(), "/job:w/task:1");
  EXPECT_EQ(TaskName("worker", 0), "/job:worker/task:0");
  EXPECT_EQ(P(TaskName("ps", 2)).task, 2);
}

TEST(DeviceNameTest, BadNamesAreRejectedNamingTheString) {
  for (const char* bad : {"job:ps", "/", "/job:", "/job:PS", "/job:1ps", "/task:x", "/task:-1", "/task:",
                          "/device:CPU", "/device:CPU:0:1", "/device::0", "/foo:bar:baz", "/job:a/job:b",
                          "/job:a//task:0", "/job:a/", "/replica:1", "/cpu:0/device:CPU:0", "/cpu:x"}) {
    auto d = DeviceName::Parse(bad);
    ASSERT_FALSE(d.ok()) << bad << " parsed as " << d->ToString();
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(std::string(d.status().message()).find(std::string("'") + bad + "'"), std::string::npos)
        << d.status();
  }
}

TEST(DeviceNameTest, Compatibility) {
  const DeviceName ps0 = P("/job:ps/task:0/device:CPU:0");
  const DeviceName w1 = P("/job:worker/task:1/device:CPU:0");
  EXPECT_TRUE(DeviceName::IsCompatible(P(""), ps0));
  EXPECT_TRUE(DeviceName::IsCompatible(P("/job:ps"), ps0));
  EXPECT_FALSE(DeviceName::IsCompatible(P("/job:ps"), w1));
  EXPECT_TRUE(DeviceName::IsCompatible(P("/job:worker/task:1"), w1));
  EXPECT_FALSE(DeviceName::IsCompatible(P("/job:worker/task:0"), w1));
  EXPECT_TRUE(DeviceName::IsCompatible(P("/device:CPU:*"), w1));
  EXPECT_FALSE(DeviceName::IsCompatible(P("/device:CPU:1"), w1));
  EXPECT_FALSE(DeviceName::IsCompatible(P("/gpu:0"), w1));
  EXPECT_TRUE(DeviceName::IsCompatible(ps0, ps0));
}

TEST(DeviceNameTest, Merge) {
  auto m = DeviceName::Merge(P("/job:ps"), P("/task:1/device:CPU:0"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->ToString(), "/job:ps/task:1/device:CPU:0");
  auto same = DeviceName::Merge(P("/job:ps/task:1"), P("/job:ps"));
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->ToString(), "/job:ps/task:1");

  auto clash = DeviceName::Merge(P("/job:ps"), P("/job:worker/task:0"));
  ASSERT_FALSE(clash.ok());
  const std::string msg(clash.status().message());
  EXPECT_NE(msg.find("/job:ps"), std::string::npos) << msg;
  EXPECT_NE(msg.find("/job:worker/task:0"), std::string::npos) << msg;
  EXPECT_FALSE(DeviceName::Merge(P("/device:CPU:0"), P("/device:CPU:1")).ok());
  EXPECT_FALSE(DeviceName::Merge(P("/task:0"), P("/task:1")).ok());
}

}  // namespace
}  // namespace weft
