// StepRecording's decisions (when to record, replay, drop a recording or
// stop recording) and its replay of feeds and fetches, on a device that
// stands for a GPU: its memory is host memory it calls device memory, and
// its "recording" doubles the kept feed into the kept fetch when launched.
// The CUDA graphs themselves are checked on a GPU (gpu_train_step_test).
#include "runtime/step_recording.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "runtime/executor.h"

namespace weft {
namespace {

// Host memory that says it is device memory.
class DeviceLikeAllocator final : public Allocator {
 public:
  // NewBlock wants whole multiples of the alignment, as size classes are.
  Buffer* Allocate(size_t bytes) override {
    return NewBlock(this, (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment);
  }
  Stats GetStats() const override { return Stats(); }
  bool on_host() const override { return false; }

 protected:
  void Release(Buffer* buffer) override { DeleteBlock(buffer); }
};

class FakeGpu final : public Device {
 public:
  FakeGpu() : Device("/job:localhost/task:0/device:GPU:0", "GPU", 1) {}
  Allocator* allocator() override { return &allocator_; }
  absl::Mutex* compute_mutex() override { return &mu_; }
  absl::StatusOr<Tensor> CopyFromHost(const Tensor& host) override {
    absl::StatusOr<Tensor> t = Tensor::Allocate(host.dtype(), host.shape(), &allocator_);
    if (!t.ok()) return t.status();
    if (absl::Status s = CopyFromHostInto(host, &*t); !s.ok()) return s;
    return t;
  }

 private:
  DeviceLikeAllocator allocator_;
  absl::Mutex mu_;
};

// out = 2 * in, elementwise, per launch; counts launches and whether it lives.
class DoublingGraph final : public DeviceStepGraph {
 public:
  DoublingGraph(Tensor in, Tensor out, int* launches, bool* alive)
      : in_(std::move(in)), out_(std::move(out)), launches_(launches), alive_(alive) {
    *alive_ = true;
  }
  ~DoublingGraph() override { *alive_ = false; }
  absl::Status Launch() override {
    ++*launches_;
    for (int64_t i = 0; i < in_.NumElements(); ++i) out_.data<float>()[i] = 2 * in_.data<float>()[i];
    return absl::OkStatus();
  }

 private:
  Tensor in_, out_;
  int* launches_;
  bool* alive_;
};

Tensor Floats(std::vector<float> v) {
  return *Tensor::FromVector<float>(TensorShape{static_cast<int64_t>(v.size())}, v);
}

class StepRecordingTest : public ::testing::Test {
 protected:
  using Action = StepRecording::Action;

  // Runs a step kernel by kernel as the executor would: Next said kRun.
  void RunStep(const Tensor& feed) {
    ASSERT_EQ(rec_.Next({feed}), Action::kRun);
    rec_.Ran();
  }
  // Records a step with `feed`'s shape, the recording keeping its buffers.
  void Record(const Tensor& feed) {
    ASSERT_EQ(rec_.Next({feed}), Action::kRecord);
    Tensor in = *gpu_.CopyFromHost(feed);
    Tensor out = *Tensor::Allocate(DType::kFloat32, feed.shape(), gpu_.allocator());
    rec_.Recorded(std::make_unique<DoublingGraph>(in, out, &launches_, &alive_), {in}, {out});
  }
  std::vector<float> Replay(const Tensor& feed) {
    EXPECT_EQ(rec_.Next({feed}), Action::kReplay);
    std::vector<Tensor> fetches;
    const std::string feed_names[] = {"x"}, fetch_names[] = {"y"};
    absl::Status s = rec_.Replay({feed}, feed_names, &fetches, fetch_names);
    EXPECT_TRUE(s.ok()) << s;
    if (fetches.size() != 1) return {};
    return std::vector<float>(fetches[0].data<float>(), fetches[0].data<float>() + fetches[0].NumElements());
  }

  FakeGpu gpu_;
  ResourceMgr resources_;
  StepRecording rec_{&gpu_, &resources_};
  int launches_ = 0;
  bool alive_ = false;
};

TEST_F(StepRecordingTest, RecordsTheThirdSteadyStepAndReplaysWithNewFeedValues) {
  RunStep(Floats({1, 2}));
  RunStep(Floats({3, 4}));
  Record(Floats({5, 6}));
  EXPECT_EQ(rec_.recordings(), 1);
  EXPECT_EQ(Replay(Floats({7, 8})), (std::vector<float>{14, 16}));
  EXPECT_EQ(Replay(Floats({-1, 0.5f})), (std::vector<float>{-2, 1}));
  EXPECT_EQ(launches_, 2);
  EXPECT_EQ(rec_.replays(), 2);
}

TEST_F(StepRecordingTest, TheNextStepsFeedsAreCopiedAheadAndUsedOnlyByThatStep) {
  RunStep(Floats({1, 2}));
  RunStep(Floats({1, 2}));
  Record(Floats({1, 2}));
  const Tensor b = Floats({3, 4}), c = Floats({5, 6});
  rec_.SetNextFeeds({b});
  EXPECT_EQ(Replay(Floats({1, 1})), (std::vector<float>{2, 2}));
  EXPECT_EQ(rec_.staged_replays(), 0);
  rec_.SetNextFeeds({c});
  EXPECT_EQ(Replay(b), (std::vector<float>{6, 8}));  // from the copy made ahead
  EXPECT_EQ(rec_.staged_replays(), 1);
  // Other tensors than the ones announced (here: c's values in another
  // buffer) are copied from the host as usual.
  EXPECT_EQ(Replay(Floats({5, 6})), (std::vector<float>{10, 12}));
  EXPECT_EQ(rec_.staged_replays(), 1);
  // A next step of another shape is not copied ahead.
  rec_.SetNextFeeds({Floats({1, 2, 3})});
  EXPECT_EQ(Replay(c), (std::vector<float>{10, 12}));
  EXPECT_EQ(rec_.staged_replays(), 1);
}

TEST_F(StepRecordingTest, OtherShapesRunBesideTheRecording) {
  RunStep(Floats({1, 2}));
  RunStep(Floats({1, 2}));
  Record(Floats({1, 2}));
  RunStep(Floats({1, 2, 3}));  // an epoch's short (here: long) last batch
  EXPECT_TRUE(alive_);
  EXPECT_EQ(Replay(Floats({4, 5})), (std::vector<float>{8, 10}));
}

TEST_F(StepRecordingTest, ShapesMustHoldBeforeRecording) {
  RunStep(Floats({1, 2}));
  RunStep(Floats({1, 2}));
  RunStep(Floats({1, 2, 3}));
  RunStep(Floats({1, 2, 3}));
  Record(Floats({1, 2, 3}));
}

TEST_F(StepRecordingTest, AVariableWithANewBufferDropsTheRecording) {
  RunStep(Floats({1}));
  RunStep(Floats({1}));
  Record(Floats({1}));
  EXPECT_EQ(Replay(Floats({2})), (std::vector<float>{4}));
  resources_.SetVariable("w", Floats({0}));  // a restore
  RunStep(Floats({1}));
  EXPECT_FALSE(alive_);
  RunStep(Floats({1}));
  Record(Floats({1}));
  EXPECT_TRUE(alive_);
  EXPECT_EQ(rec_.recordings(), 2);
}

TEST_F(StepRecordingTest, AVariableCreatedDuringTheSteadyRunDelaysTheRecording) {
  RunStep(Floats({1}));
  RunStep(Floats({1}));
  ASSERT_TRUE(resources_.LookupOrCreateVariable("v", DType::kFloat32, TensorShape{1}, [](Tensor*) {
    return absl::OkStatus();
  }).ok());
  RunStep(Floats({1}));  // the variables changed since the last step: not steady
  RunStep(Floats({1}));
  Record(Floats({1}));
}

TEST_F(StepRecordingTest, AFailedStepIsNotRecordedButRecordingGoesOn) {
  RunStep(Floats({1}));
  RunStep(Floats({1}));
  ASSERT_EQ(rec_.Next({Floats({1})}), Action::kRecord);
  rec_.Abandoned(absl::OkStatus(), "test");
  Record(Floats({1}));
}

TEST_F(StepRecordingTest, ARecordingTheDeviceRefusesEndsRecording) {
  RunStep(Floats({1}));
  RunStep(Floats({1}));
  ASSERT_EQ(rec_.Next({Floats({1})}), Action::kRecord);
  rec_.Abandoned(absl::InternalError("cudaStreamEndCapture: operation not permitted when stream is capturing"),
                 "test");
  for (int i = 0; i < 4; ++i) RunStep(Floats({1}));
  EXPECT_EQ(rec_.recordings(), 0);
}

TEST_F(StepRecordingTest, ReplayNamesAFeedOfTheWrongType) {
  RunStep(Floats({1}));
  RunStep(Floats({1}));
  Record(Floats({1}));
  Tensor int_vector = *Tensor::Allocate(DType::kInt32, TensorShape{1});
  ASSERT_EQ(rec_.Next({int_vector}), Action::kReplay);  // shapes match; the executor checks dtypes first
  const std::string feed_names[] = {"x"}, fetch_names[] = {"y"};
  std::vector<Tensor> fetches;
  absl::Status s = rec_.Replay({int_vector}, feed_names, &fetches, fetch_names);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("feed 'x'"), absl::string_view::npos) << s;
}

TEST_F(StepRecordingTest, DeviceTensorsAsFeedsRunKernelByKernel) {
  Tensor on_device = *gpu_.CopyFromHost(Floats({1}));
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(rec_.Next({on_device}), Action::kRun);
    rec_.Ran();
  }
}

TEST(RecordableOpsTest, TheListsDisagreeNowhere) {
  for (const char* op : {"MatMul", "ApplyAdam", "SparseSoftmaxCrossEntropyWithLogits", "Conv2D", "Attention",
                         "Dropout"}) {
    EXPECT_TRUE(RecordableOp(op)) << op;
    EXPECT_EQ(WhyNotRecordableOp(op), "") << op;
  }
  for (const char* op : {"_Recv", "_Send", "CollectiveAllReduce"}) {
    EXPECT_FALSE(RecordableOp(op)) << op;
    EXPECT_NE(WhyNotRecordableOp(op), "") << op;
  }
  EXPECT_FALSE(RecordableOp("NoSuchOp"));
}

}  // namespace
}  // namespace weft
