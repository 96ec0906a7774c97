#include <atomic>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/thread_pool.h"
#include "graph/attr.h"
#include "graph/builder.h"
#include "graph/input_ops.h"
#include "gtest/gtest.h"
#include "runtime/data/test_files.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/resource_mgr.h"

namespace weft {
namespace {

using ::weft::data::testing::IdxBytes;
using ::weft::data::testing::TempPath;
using ::weft::data::testing::WriteFile;

constexpr int64_t kElems = 6;  // examples are [2, 3]

// Writes `n` examples as uncompressed IDX files named after `name`: example i
// has label i and pixels 10*i + k, so a batch's features can be checked
// against its labels. Returns a spec whose train and test splits are both
// those files.
DatasetSpec WriteDataset(const std::string& name, int n) {
  std::vector<uint8_t> pixels;
  std::vector<uint8_t> labels;
  for (int i = 0; i < n; ++i) {
    labels.push_back(static_cast<uint8_t>(i));
    for (int k = 0; k < kElems; ++k) pixels.push_back(static_cast<uint8_t>(10 * i + k));
  }
  const std::string images = TempPath(name + "-images-idx3-ubyte");
  const std::string label_file = TempPath(name + "-labels-idx1-ubyte");
  WriteFile(images, IdxBytes({static_cast<uint32_t>(n), 2, 3}, pixels));
  WriteFile(label_file, IdxBytes({static_cast<uint32_t>(n)}, labels));
  DatasetSpec spec;
  spec.set_format(DatasetSpec::IDX);
  spec.set_train_images(images);
  spec.set_train_labels(label_file);
  spec.set_test_images(images);
  spec.set_test_labels(label_file);
  return spec;
}

ops::InputBatchOptions Options(bool train, int64_t batch, int64_t shard, int64_t shards) {
  ops::InputBatchOptions o;
  o.train = train;
  o.batch_size = batch;
  o.shard_index = shard;
  o.num_shards = shards;
  o.seed = 7;
  o.example_shape = TensorShape{2, 3};
  o.num_classes = 100;
  return o;
}

struct Step {
  std::vector<int32_t> labels;
  int64_t epoch = -1;
  TensorShape features_shape;
};

// Checks that every example's features are its pixels / 255.
void ExpectFeaturesMatchLabels(const Tensor& features, const Tensor& labels) {
  auto f = features.flat<float>();
  auto l = labels.flat<int32_t>();
  ASSERT_EQ(static_cast<int64_t>(f.size()), static_cast<int64_t>(l.size()) * kElems);
  for (size_t b = 0; b < l.size(); ++b) {
    for (int k = 0; k < kElems; ++k) {
      EXPECT_FLOAT_EQ(f[b * kElems + k], static_cast<float>(10 * l[b] + k) / 255.0f) << "label " << l[b];
    }
  }
}

// Runs one step of `in` through `exec` and unpacks it.
Step RunStep(Executor* exec) {
  std::vector<Tensor> out;
  absl::Status s = exec->Run({}, &out);
  EXPECT_TRUE(s.ok()) << s;
  Step step;
  if (!s.ok()) return step;
  ExpectFeaturesMatchLabels(out[0], out[1]);
  auto l = out[1].flat<int32_t>();
  step.labels.assign(l.begin(), l.end());
  step.epoch = out[2].flat<int64_t>()[0];
  step.features_shape = out[0].shape();
  return step;
}

std::unique_ptr<Executor> MakeExecutor(const Graph& g, Device* device, const ops::InputBatchOutputs& in,
                                       ResourceMgr* resources = nullptr) {
  ExecutorOptions o;
  o.fetches = {in.features.name(), in.labels.name(), in.epoch.name()};
  o.resources = resources;
  auto e = Executor::Create(&g, device, o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *std::move(e) : nullptr;
}

std::vector<int32_t> Sorted(std::vector<int32_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

class InputBatchTest : public ::testing::Test {
 protected:
  CpuDevice device_{"/device:CPU:0", 1};
};

TEST_F(InputBatchTest, BuilderDeclaresOutputs) {
  Graph g;
  GraphBuilder b(&g);
  ops::InputBatchOutputs in = ops::InputBatch(&b, WriteDataset("decl", 4), Options(true, 2, 0, 1), "input");
  ASSERT_TRUE(b.status().ok()) << b.status();
  EXPECT_EQ(in.features.dtype(), DType::kFloat32);
  EXPECT_EQ(in.features.shape(), (TensorShape{-1, 2, 3}));
  EXPECT_EQ(in.labels.dtype(), DType::kInt32);
  EXPECT_EQ(in.labels.shape(), (TensorShape{-1}));
  EXPECT_EQ(in.epoch.dtype(), DType::kInt64);
  EXPECT_EQ(in.epoch.shape(), TensorShape{});
  EXPECT_EQ(in.features.name(), "input");
  EXPECT_EQ(in.labels.name(), "input:1");
  EXPECT_EQ(in.epoch.name(), "input:2");
}

// global_batch becomes the node's attribute; unset, the node is what it was
// before the attribute existed.
TEST_F(InputBatchTest, BuilderSetsGlobalBatchOnlyWhenAsked) {
  const DatasetSpec spec = WriteDataset("declglobal", 4);
  Graph g;
  GraphBuilder b(&g);
  ops::InputBatchOptions o = Options(true, 2, 1, 2);
  ops::InputBatchOutputs sharded = ops::InputBatch(&b, spec, o, "sharded");
  o.global_batch = 4;
  ops::InputBatchOutputs global = ops::InputBatch(&b, spec, o, "global");
  ASSERT_TRUE(b.status().ok()) << b.status();
  EXPECT_EQ(sharded.features.node->def().attr().count("global_batch"), 0u);
  ASSERT_EQ(global.features.node->def().attr().count("global_batch"), 1u);
  EXPECT_EQ(global.features.node->def().attr().at("global_batch").i(), 4);
  EXPECT_EQ(global.features.shape(), (TensorShape{-1, 2, 3}));
}

// Serialised proto bytes are not UTF-8 (train_limit 200 is the varint
// 0xC8 0x01), which a proto3 string attribute could not carry; the base64
// form survives a NodeDef's round trip.
TEST(DatasetSpecAttrTest, RoundTripsThroughANodeDef) {
  DatasetSpec spec;
  spec.set_dir("/data");
  spec.set_prefetch(3);
  spec.set_train_limit(200);
  spec.add_train_files("a.tfrecord");
  NodeDef node;
  (*node.mutable_attr())["dataset"].set_s(EncodeDatasetSpecAttr(spec));
  NodeDef parsed;
  ASSERT_TRUE(parsed.ParseFromString(node.SerializeAsString()));
  auto back = DecodeDatasetSpecAttr(parsed.attr().at("dataset").s());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), spec.SerializeAsString());
  EXPECT_EQ(DecodeDatasetSpecAttr("not base64!").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeDatasetSpecAttr("////").status().code(), absl::StatusCode::kInvalidArgument);
}

// Two shards of 12 examples, batch 2: each epoch of each shard is 3 batches;
// together an epoch's labels are exactly the dataset; epochs count up across
// the boundary; the next epoch is reshuffled but covers the same examples.
TEST_F(InputBatchTest, ShardsPartitionEachEpochAndReshuffle) {
  const DatasetSpec spec = WriteDataset("shards", 12);
  Graph g;
  GraphBuilder b(&g);
  ops::InputBatchOutputs s0 = ops::InputBatch(&b, spec, Options(true, 2, 0, 2), "shard0");
  ops::InputBatchOutputs s1 = ops::InputBatch(&b, spec, Options(true, 2, 1, 2), "shard1");
  ASSERT_TRUE(b.status().ok()) << b.status();
  auto e0 = MakeExecutor(g, &device_, s0);
  auto e1 = MakeExecutor(g, &device_, s1);
  ASSERT_NE(e0, nullptr);
  ASSERT_NE(e1, nullptr);

  std::vector<int32_t> epoch_labels[2][2];  // [shard][epoch]
  Executor* execs[2] = {e0.get(), e1.get()};
  for (int shard = 0; shard < 2; ++shard) {
    for (int i = 0; i < 6; ++i) {
      Step step = RunStep(execs[shard]);
      ASSERT_EQ(step.labels.size(), 2u) << "shard " << shard << " step " << i;
      EXPECT_EQ(step.epoch, i / 3) << "shard " << shard << " step " << i;
      for (int32_t l : step.labels) {
        EXPECT_EQ(l % 2, shard) << "example " << l << " is not in shard " << shard;
        epoch_labels[shard][i / 3].push_back(l);
      }
    }
  }
  std::vector<int32_t> all = epoch_labels[0][0];
  all.insert(all.end(), epoch_labels[1][0].begin(), epoch_labels[1][0].end());
  EXPECT_EQ(Sorted(all), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  for (int shard = 0; shard < 2; ++shard) {
    EXPECT_EQ(Sorted(epoch_labels[shard][0]), Sorted(epoch_labels[shard][1])) << "shard " << shard;
    EXPECT_NE(epoch_labels[shard][0], epoch_labels[shard][1]) << "shard " << shard << " was not reshuffled";
  }
  EXPECT_NE(epoch_labels[0][0], (std::vector<int32_t>{0, 2, 4, 6, 8, 10})) << "epoch 0 was not shuffled";
}

// Test split: 7 examples in batches of 3 in file order, the last partial
// batch kept, then one empty batch, then the same pass again.
TEST_F(InputBatchTest, TestSplitEndsEachPassWithAnEmptyBatch) {
  const DatasetSpec spec = WriteDataset("testsplit", 7);
  Graph g;
  GraphBuilder b(&g);
  ops::InputBatchOutputs in = ops::InputBatch(&b, spec, Options(false, 3, 0, 1), "eval_input");
  ASSERT_TRUE(b.status().ok()) << b.status();
  auto exec = MakeExecutor(g, &device_, in);
  ASSERT_NE(exec, nullptr);
  const std::vector<std::vector<int32_t>> pass = {{0, 1, 2}, {3, 4, 5}, {6}, {}};
  for (int64_t p = 0; p < 2; ++p) {
    for (const auto& want : pass) {
      Step step = RunStep(exec.get());
      EXPECT_EQ(step.labels, want) << "pass " << p;
      EXPECT_EQ(step.epoch, p);
      EXPECT_EQ(step.features_shape, (TensorShape{static_cast<int64_t>(want.size()), 2, 3}));
    }
  }
}

TEST_F(InputBatchTest, ShardedTestSplitKeepsItsShare) {
  const DatasetSpec spec = WriteDataset("testshard", 7);
  Graph g;
  GraphBuilder b(&g);
  ops::InputBatchOutputs in = ops::InputBatch(&b, spec, Options(false, 3, 1, 3), "eval_input");
  ASSERT_TRUE(b.status().ok()) << b.status();
  auto exec = MakeExecutor(g, &device_, in);
  ASSERT_NE(exec, nullptr);
  EXPECT_EQ(RunStep(exec.get()).labels, (std::vector<int32_t>{1, 4}));
  EXPECT_EQ(RunStep(exec.get()).labels, (std::vector<int32_t>{}));
  EXPECT_EQ(RunStep(exec.get()).labels, (std::vector<int32_t>{1, 4}));
}

// The iterator lives in the ResourceMgr under the node's name: separate
// executors (and one-off runs) on one ResourceMgr continue it; another
// ResourceMgr (another session) starts its own.
TEST_F(InputBatchTest, StatePersistsInTheResourceMgr) {
  DatasetSpec spec = WriteDataset("persist", 6);
  spec.set_no_shuffle(true);
  Graph g;
  GraphBuilder b(&g);
  ops::InputBatchOutputs in = ops::InputBatch(&b, spec, Options(true, 2, 0, 1), "input");
  ASSERT_TRUE(b.status().ok()) << b.status();

  auto r1 = RunGraphOnce(g, &device_, {}, {in.labels.name()});
  auto r2 = RunGraphOnce(g, &device_, {}, {in.labels.name()});
  ASSERT_TRUE(r1.ok()) << r1.status();
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ((*r1)[0].flat<int32_t>()[0], 0);
  EXPECT_EQ((*r2)[0].flat<int32_t>()[0], 2);
  EXPECT_EQ(device_.resources()->ResourceNames(), (std::vector<std::string>{"input"}));
  EXPECT_TRUE(device_.resources()->VariableNames().empty());

  ResourceMgr session;
  auto exec = MakeExecutor(g, &device_, in, &session);
  ASSERT_NE(exec, nullptr);
  EXPECT_EQ(RunStep(exec.get()).labels, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(RunStep(exec.get()).labels, (std::vector<int32_t>{2, 3}));
  auto r3 = RunGraphOnce(g, &device_, {}, {in.labels.name()});
  ASSERT_TRUE(r3.ok()) << r3.status();
  EXPECT_EQ((*r3)[0].flat<int32_t>()[0], 4);  // the device's iterator went on alone

  session.Clear();  // a new session's worth of state: starts over
  EXPECT_TRUE(session.ResourceNames().empty());
  EXPECT_EQ(RunStep(exec.get()).labels, (std::vector<int32_t>{0, 1}));
}

// Concurrent steps on one iterator take distinct batches: over two epochs
// every example comes exactly twice and each epoch has every example once.
TEST_F(InputBatchTest, ConcurrentStepsShareOneIterator) {
  const DatasetSpec spec = WriteDataset("concurrent", 12);
  Graph g;
  GraphBuilder b(&g);
  ops::InputBatchOutputs in = ops::InputBatch(&b, spec, Options(true, 2, 0, 1), "input");
  ASSERT_TRUE(b.status().ok()) << b.status();
  auto exec = MakeExecutor(g, &device_, in);
  ASSERT_NE(exec, nullptr);

  absl::Mutex mu;
  std::vector<int32_t> seen[2];
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 3; ++i) {
        Step step = RunStep(exec.get());
        absl::MutexLock lock(&mu);
        ASSERT_TRUE(step.epoch == 0 || step.epoch == 1) << step.epoch;
        seen[step.epoch].insert(seen[step.epoch].end(), step.labels.begin(), step.labels.end());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int e = 0; e < 2; ++e) {
    EXPECT_EQ(Sorted(seen[e]), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})) << "epoch " << e;
  }
}

// The loaded split is cached process-wide while some session holds it: a
// second session reads it even after the file is gone; once every session
// has let go, the next one reads the disk again.
TEST_F(InputBatchTest, LoadedSplitIsSharedAcrossSessions) {
  const DatasetSpec spec = WriteDataset("cached", 4);
  Graph g;
  GraphBuilder b(&g);
  ops::InputBatchOutputs in0 = ops::InputBatch(&b, spec, Options(true, 2, 0, 2), "replica0");
  ops::InputBatchOutputs in1 = ops::InputBatch(&b, spec, Options(true, 2, 1, 2), "replica1");
  ASSERT_TRUE(b.status().ok()) << b.status();
  ResourceMgr a, c;
  auto e0 = MakeExecutor(g, &device_, in0, &a);
  ASSERT_NE(e0, nullptr);
  EXPECT_EQ(Sorted(RunStep(e0.get()).labels), (std::vector<int32_t>{0, 2}));
  ASSERT_EQ(std::remove(spec.train_images().c_str()), 0);

  auto e1 = MakeExecutor(g, &device_, in1, &c);
  ASSERT_NE(e1, nullptr);
  EXPECT_EQ(Sorted(RunStep(e1.get()).labels), (std::vector<int32_t>{1, 3}));

  a.Clear();
  c.Clear();
  std::vector<Tensor> out;
  absl::Status s = e1->Run({}, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
}

// Runs a one-node graph and returns the step's error (OK if it ran).
absl::Status RunInput(Device* device, const DatasetSpec& spec, const ops::InputBatchOptions& o) {
  Graph g;
  GraphBuilder b(&g);
  ops::InputBatchOutputs in = ops::InputBatch(&b, spec, o, "train_input");
  if (!b.status().ok()) return b.status();
  return RunGraphOnce(g, device, {}, {in.labels.name()}).status();
}

TEST_F(InputBatchTest, MissingFileNamesTheFileAndNode) {
  DatasetSpec spec = WriteDataset("missing", 4);
  spec.set_train_images(TempPath("no-such-images-idx3-ubyte"));
  absl::Status s = RunInput(&device_, spec, Options(true, 2, 0, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("no-such-images-idx3-ubyte"), std::string::npos) << s;
  EXPECT_NE(s.message().find("train_input"), std::string::npos) << s;
  // A failed load leaves no state; the next step tries again and can succeed.
  EXPECT_TRUE(device_.resources()->ResourceNames().empty());
}

// A SERIES dataset's batches carry float targets, its test pass ends with an
// empty float batch, and a node whose float_targets does not match its
// dataset is refused by the kernel, naming the attribute.
TEST_F(InputBatchTest, SeriesBatchesCarryFloatTargets) {
  std::string csv = "v\n";
  for (int i = 0; i < 20; ++i) absl::StrAppend(&csv, i, "\n");
  WriteFile(TempPath("input-series.csv"), csv);
  DatasetSpec spec;
  spec.set_format(DatasetSpec::SERIES);
  spec.add_train_files(TempPath("input-series.csv"));
  spec.mutable_series()->set_column("v");
  spec.mutable_series()->set_window(3);
  spec.mutable_series()->set_test_fraction(0.5f);
  spec.mutable_series()->set_raw(true);
  ops::InputBatchOptions o = Options(false, 4, 0, 1);
  o.example_shape = TensorShape{3, 1};
  o.num_classes = 0;
  Graph g;
  GraphBuilder b(&g);
  ops::InputBatchOutputs in = ops::InputBatch(&b, spec, o, "series_input");
  ASSERT_TRUE(b.status().ok()) << b.status();
  EXPECT_EQ(in.labels.dtype(), DType::kFloat32);
  auto exec = MakeExecutor(g, &device_, in);
  ASSERT_NE(exec, nullptr);
  // Test split: values 10..19, 7 windows of 3 with the next value as target.
  std::vector<float> targets;
  for (;;) {
    std::vector<Tensor> out;
    ASSERT_TRUE(exec->Run({}, &out).ok());
    ASSERT_EQ(out[1].dtype(), DType::kFloat32);
    if (out[1].NumElements() == 0) break;
    for (int64_t r = 0; r < out[1].NumElements(); ++r) {
      EXPECT_EQ(out[0].data<float>()[r * 3 + 2] + 1, out[1].data<float>()[r]);
      targets.push_back(out[1].data<float>()[r]);
    }
  }
  EXPECT_EQ(targets, (std::vector<float>{13, 14, 15, 16, 17, 18, 19}));

  // float_targets false for a SERIES spec: the kernel refuses the node.
  Graph bad;
  GraphBuilder bb(&bad);
  Node* n = bb.AddNode("InputBatch", {},
                       {Attr("dataset", EncodeDatasetSpecAttr(spec)), Attr("train", true),
                        Attr("batch_size", int64_t{2}), Attr("example_shape", TensorShape{3, 1}),
                        Attr("float_targets", false)},
                       "mislabelled");
  ASSERT_NE(n, nullptr) << bb.status();
  absl::Status s = RunGraphOnce(bad, &device_, {}, {"mislabelled:1"}).status();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("float_targets"), std::string::npos) << s;
  EXPECT_NE(s.message().find("SERIES"), std::string::npos) << s;
}

TEST_F(InputBatchTest, CorruptFileNamesTheFile) {
  DatasetSpec spec = WriteDataset("corrupt", 4);
  WriteFile(spec.train_labels(), std::string("\x00\x00\x08\x01\x00\x00", 6));  // truncated header
  absl::Status s = RunInput(&device_, spec, Options(true, 2, 0, 1));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(spec.train_labels()), std::string::npos) << s;
  EXPECT_NE(s.message().find("train_input"), std::string::npos) << s;
}

TEST_F(InputBatchTest, BadShardNamesTheAttr) {
  const DatasetSpec spec = WriteDataset("badshard", 4);
  absl::Status s = RunInput(&device_, spec, Options(true, 2, 2, 2));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("shard_index"), std::string::npos) << s;
  EXPECT_NE(s.message().find("train_input"), std::string::npos) << s;
  s = RunInput(&device_, spec, Options(true, 2, 0, 0));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("num_shards"), std::string::npos) << s;
}

TEST_F(InputBatchTest, BatchLargerThanTheShardIsAnError) {
  const DatasetSpec spec = WriteDataset("bigbatch", 10);
  absl::Status s = RunInput(&device_, spec, Options(true, 6, 1, 2));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("batch_size=6"), std::string::npos) << s;
  EXPECT_NE(s.message().find("holds 5 examples"), std::string::npos) << s;
  EXPECT_NE(s.message().find("bigbatch-images"), std::string::npos) << s;
  // Evaluation keeps partial batches, so the same shard gives one of 5.
  CpuDevice other("/device:CPU:1", 1);
  EXPECT_TRUE(RunInput(&other, spec, Options(false, 6, 1, 2)).ok());
}

TEST_F(InputBatchTest, BadAttrsAreRejectedWhenBuilding) {
  const DatasetSpec spec = WriteDataset("badattrs", 4);
  ops::InputBatchOptions o = Options(true, 0, 0, 1);
  absl::Status s = RunInput(&device_, spec, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("batch_size"), std::string::npos) << s;
  o = Options(true, 2, 0, 1);
  o.example_shape = TensorShape{-1, 3};
  s = RunInput(&device_, spec, o);
  EXPECT_NE(s.message().find("example_shape"), std::string::npos) << s;
  o.example_shape = TensorShape{4, 3};  // 12 pixels; the images have 6
  s = RunInput(&device_, spec, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("example shape"), std::string::npos) << s;

  Graph g;
  GraphBuilder b(&g);
  b.AddNode("InputBatch", {},
            {Attr("dataset", "not base64!"), Attr("train", true), Attr("batch_size", 2),
             Attr("example_shape", TensorShape{2, 3})},
            "raw");
  EXPECT_NE(b.status().message().find("dataset"), std::string::npos) << b.status();
}

TEST_F(InputBatchTest, OutOfRangeLabelIsAnError) {
  const DatasetSpec spec = WriteDataset("labels", 4);
  ops::InputBatchOptions o = Options(true, 2, 0, 1);
  o.num_classes = 3;  // label 3 is out of range
  absl::Status s = RunInput(&device_, spec, o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("num_classes"), std::string::npos) << s;
}

// ---- global_batch --------------------------------------------------------------

// Shard `shard` of `shards`, reading its slice of windows of `global_batch`.
ops::InputBatchOptions GlobalOptions(int64_t global_batch, int64_t shard, int64_t shards) {
  ops::InputBatchOptions o = Options(true, global_batch / shards, shard, shards);
  o.global_batch = global_batch;
  return o;
}

// One plan's input nodes in one session: `shards` nodes "replica<r>/input"
// that read `global_batch` examples a step together, each through its own
// executor. With `global` false (and one shard), today's reader of the whole
// split in batches of global_batch: the reference.
struct Replicas {
  Graph graph;
  std::vector<std::unique_ptr<Executor>> execs;
  int64_t batch = 0;
};

std::unique_ptr<Replicas> MakeReplicas(const DatasetSpec& spec, int64_t global_batch, int64_t shards, bool global,
                                       int64_t skip_batches, Device* device, ResourceMgr* session) {
  auto p = std::make_unique<Replicas>();
  p->batch = global_batch / shards;
  GraphBuilder b(&p->graph);
  std::vector<ops::InputBatchOutputs> ins;
  for (int64_t r = 0; r < shards; ++r) {
    ops::InputBatchOptions o = global ? GlobalOptions(global_batch, r, shards) : Options(true, p->batch, r, shards);
    o.skip_batches = skip_batches;
    ins.push_back(ops::InputBatch(&b, spec, o, absl::StrCat("replica", r, "/input")));
  }
  EXPECT_TRUE(b.status().ok()) << b.status();
  for (const ops::InputBatchOutputs& in : ins) p->execs.push_back(MakeExecutor(p->graph, device, in, session));
  return p;
}

// One step of every replica: their labels in replica order, and their epoch.
Step GlobalStep(Replicas* p) {
  Step out;
  for (size_t r = 0; r < p->execs.size(); ++r) {
    if (p->execs[r] == nullptr) return out;
    Step s = RunStep(p->execs[r].get());
    EXPECT_EQ(static_cast<int64_t>(s.labels.size()), p->batch) << "replica " << r;
    if (r == 0) out.epoch = s.epoch;
    EXPECT_EQ(s.epoch, out.epoch) << "replica " << r;
    out.labels.insert(out.labels.end(), s.labels.begin(), s.labels.end());
  }
  return out;
}

// The first `steps` steps of one reader of the whole split in batches of
// `global_batch`, in a session of its own: what replicas must read together.
std::vector<Step> ReferenceSteps(const DatasetSpec& spec, int64_t global_batch, int steps, Device* device) {
  ResourceMgr session;
  auto reference = MakeReplicas(spec, global_batch, 1, false, 0, device, &session);
  std::vector<Step> want;
  for (int k = 0; k < steps; ++k) want.push_back(GlobalStep(reference.get()));
  return want;
}

// 20 examples, global batch 6: 3 windows an epoch (2 examples dropped).
// Whether 2 or 3 replicas read it, a step's batches together are the
// reference's batch at that step, in the same epochs.
TEST_F(InputBatchTest, GlobalBatchShardsReadSlicesOfOneGlobalOrder) {
  const DatasetSpec spec = WriteDataset("global", 20);
  const std::vector<Step> want = ReferenceSteps(spec, 6, 7, &device_);
  for (int k = 0; k < 7; ++k) EXPECT_EQ(want[k].epoch, k / 3) << "step " << k;
  EXPECT_NE(want[0].labels, (std::vector<int32_t>{0, 1, 2, 3, 4, 5})) << "epoch 0 was not shuffled";
  for (int64_t shards : {2, 3}) {
    ResourceMgr session;
    auto plan = MakeReplicas(spec, 6, shards, true, 0, &device_, &session);
    for (int k = 0; k < 7; ++k) {
      Step got = GlobalStep(plan.get());
      EXPECT_EQ(got.labels, want[k].labels) << shards << " replicas, step " << k;
      EXPECT_EQ(got.epoch, want[k].epoch) << shards << " replicas, step " << k;
    }
  }
}

// An elastic job goes from 2 replicas to 3 at step 4 (after an epoch's
// end) in the same session: the nodes keep their names, so the session's
// pipelines of replica0 and replica1 must be rebuilt for their new slices,
// from skip_batches, not continued. Registered again with the same attrs
// (skip_batches aside), a node continues its pipeline.
TEST_F(InputBatchTest, ResizedReplicasInOneSessionReadOnFromTheirNewSlices) {
  const DatasetSpec spec = WriteDataset("resize", 20);
  const std::vector<Step> want = ReferenceSteps(spec, 6, 9, &device_);

  ResourceMgr session;
  auto two = MakeReplicas(spec, 6, 2, true, 0, &device_, &session);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(GlobalStep(two.get()).labels, want[k].labels) << "step " << k;
  auto three = MakeReplicas(spec, 6, 3, true, 4, &device_, &session);
  for (int k = 4; k < 8; ++k) {
    Step got = GlobalStep(three.get());
    EXPECT_EQ(got.labels, want[k].labels) << "step " << k;
    EXPECT_EQ(got.epoch, want[k].epoch) << "step " << k;
  }
  EXPECT_EQ(session.ResourceNames(),
            (std::vector<std::string>{"replica0/input", "replica1/input", "replica2/input"}));
  auto again = MakeReplicas(spec, 6, 3, true, 0, &device_, &session);
  EXPECT_EQ(GlobalStep(again.get()).labels, want[8].labels);
}

// Expects `s` to be INVALID_ARGUMENT naming each of `parts`.
void ExpectInvalid(const absl::Status& s, const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const std::string& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << p << " in " << s;
}

// The InputBatch node `name` with `attrs` and no shape inference, run once:
// what the kernel says to a graph whose inference never ran.
absl::Status RunSkippingInference(Device* device, const std::string& name, const AttrList& attrs) {
  NodeDef def;
  def.set_name(name);
  def.set_op("InputBatch");
  for (const auto& [k, v] : attrs) (*def.mutable_attr())[k] = v;
  Graph g;
  absl::Status added = g.AddNodeSkippingInference(def, {DType::kFloat32, DType::kInt32, DType::kInt64}).status();
  if (!added.ok()) return added;
  return RunGraphOnce(g, device, {}, {name + ":1"}).status();
}

TEST_F(InputBatchTest, MismatchedGlobalBatchIsRefusedNamingTheNode) {
  const DatasetSpec spec = WriteDataset("globalbad", 20);
  ops::InputBatchOptions o = GlobalOptions(6, 0, 2);
  o.batch_size = 2;  // 2 * 2 != 6
  ExpectInvalid(RunInput(&device_, spec, o), {"train_input", "global_batch' 6", "batch_size=2", "num_shards=2"});
  o = GlobalOptions(6, 0, 2);
  o.train = false;
  ExpectInvalid(RunInput(&device_, spec, o), {"train_input", "global_batch' 6", "train=false"});

  // The kernel checks the same for a graph whose inference never ran.
  const AttrList mismatched = {Attr("dataset", EncodeDatasetSpecAttr(spec)), Attr("train", true),
                               Attr("batch_size", int64_t{2}), Attr("shard_index", int64_t{1}),
                               Attr("num_shards", int64_t{2}), Attr("global_batch", int64_t{6}),
                               Attr("example_shape", TensorShape{2, 3})};
  ExpectInvalid(RunSkippingInference(&device_, "mismatched", mismatched),
                {"'mismatched'", "global_batch 6", "batch_size=2", "num_shards=2 = 4"});
  const AttrList eval = {Attr("dataset", EncodeDatasetSpecAttr(spec)), Attr("train", false),
                         Attr("batch_size", int64_t{3}), Attr("shard_index", int64_t{1}),
                         Attr("num_shards", int64_t{2}), Attr("global_batch", int64_t{6}),
                         Attr("example_shape", TensorShape{2, 3})};
  ExpectInvalid(RunSkippingInference(&device_, "eval_global", eval),
                {"'eval_global'", "global_batch 6", "train=false"});
  const AttrList overflowing = {Attr("dataset", EncodeDatasetSpecAttr(spec)), Attr("train", true),
                                Attr("batch_size", int64_t{1} << 62), Attr("num_shards", int64_t{4}),
                                Attr("global_batch", int64_t{6}), Attr("example_shape", TensorShape{2, 3})};
  ExpectInvalid(RunSkippingInference(&device_, "overflowing", overflowing), {"'overflowing'", "overflows"});
  EXPECT_TRUE(device_.resources()->ResourceNames().empty());

  // A split smaller than one global batch: refused at the first step.
  ExpectInvalid(RunInput(&device_, spec, GlobalOptions(24, 1, 2)),
                {"train_input", "global_batch=24", "20 examples", "globalbad-images"});
}

// ---- ResourceMgr's generic resources ----------------------------------------

struct Counter {
  int value = 0;
};

TEST(ResourceMgrTest, LookupOrCreateCreatesOnceAndChecksTheType) {
  ResourceMgr rm;
  int created = 0;
  auto make = [&]() -> absl::StatusOr<std::shared_ptr<Counter>> {
    ++created;
    return std::make_shared<Counter>();
  };
  auto a = rm.LookupOrCreate<Counter>("c", make);
  ASSERT_TRUE(a.ok()) << a.status();
  (*a)->value = 5;
  auto b = rm.LookupOrCreate<Counter>("c", make);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->value, 5);
  EXPECT_EQ(created, 1);

  auto wrong = rm.LookupOrCreate<std::string>(
      "c", []() -> absl::StatusOr<std::shared_ptr<std::string>> { return std::make_shared<std::string>(); });
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);

  rm.Clear();
  EXPECT_EQ((*a)->value, 5);  // still held by the caller
  auto c = rm.LookupOrCreate<Counter>("c", make);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)->value, 0);
  EXPECT_EQ(created, 2);
}

TEST(ResourceMgrTest, FailedCreateIsRetried) {
  ResourceMgr rm;
  auto fail = []() -> absl::StatusOr<std::shared_ptr<Counter>> { return absl::NotFoundError("nope"); };
  EXPECT_EQ(rm.LookupOrCreate<Counter>("c", fail).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(rm.ResourceNames().empty());
  auto ok = rm.LookupOrCreate<Counter>(
      "c", []() -> absl::StatusOr<std::shared_ptr<Counter>> { return std::make_shared<Counter>(); });
  EXPECT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(rm.ResourceNames(), (std::vector<std::string>{"c"}));
}

TEST(ResourceMgrTest, ConcurrentCallersCreateOnce) {
  ResourceMgr rm;
  std::atomic<int> created{0};
  std::vector<std::thread> threads;
  std::vector<Counter*> got(8, nullptr);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      auto r = rm.LookupOrCreate<Counter>("c", [&]() -> absl::StatusOr<std::shared_ptr<Counter>> {
        ++created;
        return std::make_shared<Counter>();
      });
      if (r.ok()) got[t] = r->get();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(created.load(), 1);
  for (Counter* p : got) EXPECT_EQ(p, got[0]);
}

}  // namespace
}  // namespace weft
