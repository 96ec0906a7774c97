// Writes the seed corpora of the fuzz targets with weft's own writers, so
// that every seed is a valid input the fuzzer mutates from:
//
//   bazel run //tests/fuzz:make_corpus -- $PWD/tests/fuzz/corpus
//
// The job file seeds are copies of examples/ (and one JSON job), made by
// hand; this tool writes the binary ones. Seeds are small on purpose: a
// fuzzer mutates a few hundred bytes far faster than a megabyte.
#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/tensor.h"
#include "common/tensor_proto_coding.h"
#include "graph/builder.h"
#include "graph/graph.h"
#include "proto/checkpoint.pb.h"
#include "proto/graph.pb.h"
#include "ps/manifest.h"
#include "ps/shard_file.h"
#include "runtime/data/tfrecord.h"
#include "worker/collective/grpc_chunk_coding.h"
#include "worker/grpc_tensor_coding.h"

namespace weft {
namespace {

std::string g_root;

void Fail(const std::string& what) {
  std::fprintf(stderr, "make_corpus: %s\n", what.c_str());
  std::exit(1);
}

std::string Dir(const std::string& target) {
  const std::string dir = g_root + "/" + target;
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

void Put(const std::string& target, const std::string& name, const std::string& bytes) {
  const std::string path = Dir(target) + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f) != 0) {
    Fail("cannot write " + path);
  }
}

std::string Slurp(const std::string& path) {
  auto s = ReadFileToString(Env::Default(), path);
  if (!s.ok()) Fail(std::string(s.status().message()));
  return *s;
}

Tensor Iota(DType dtype, const TensorShape& shape) {
  Tensor t(dtype, shape);
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.TotalBytes(); ++i) p[i] = static_cast<uint8_t>(i * 37 + 11);
  if (dtype == DType::kBool) {
    for (size_t i = 0; i < t.TotalBytes(); ++i) p[i] &= 1;
  }
  return t;
}

std::string Gzip(const std::string& bytes) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) Fail("zlib");
  std::string out(deflateBound(&zs, bytes.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  zs.avail_in = static_cast<uInt>(bytes.size());
  zs.next_out = reinterpret_cast<Bytef*>(&out[0]);
  zs.avail_out = static_cast<uInt>(out.size());
  if (deflate(&zs, Z_FINISH) != Z_STREAM_END) Fail("deflate");
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string Idx(std::vector<uint32_t> dims) {
  std::string out = {0, 0, 8, static_cast<char>(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>(d >> shift));
    n *= d;
  }
  for (size_t i = 0; i < n; ++i) out.push_back(static_cast<char>(i * 13 % 251));
  return out;
}

void Idx() {
  Put("idx_reader_fuzzer", "images_2x3x3", Idx({2, 3, 3}));
  Put("idx_reader_fuzzer", "labels_4", Idx({4}));
  Put("idx_reader_fuzzer", "images_1x2x2.gz", Gzip(Idx({1, 2, 2})));
  Put("idx_reader_fuzzer", "empty_0x28x28", Idx({0, 28, 28}));
}

void TFRecords() {
  const std::string tmp = g_root + "/.tmp.tfrecord";
  auto write = [&](const std::vector<std::string>& records) {
    auto w = data::TFRecordWriter::Open(tmp);
    if (!w.ok()) Fail(std::string(w.status().message()));
    for (const std::string& r : records) {
      if (!(*w)->Write(r).ok()) Fail("tfrecord write");
    }
    if (!(*w)->Close().ok()) Fail("tfrecord close");
    const std::string bytes = Slurp(tmp);
    std::remove(tmp.c_str());
    return bytes;
  };
  Put("tfrecord_fuzzer", "two_records", write({"first", std::string(20, 'x')}));
  std::string a, b;
  const uint8_t px[4] = {1, 2, 3, 4};
  data::EncodeImageExample(7, px, &a);
  data::EncodeImageExample(0, px, &b);
  Put("tfrecord_fuzzer", "two_image_examples", write({a, b}));
  Put("tfrecord_fuzzer", "empty_record", write({""}));
}

void Shards() {
  const std::string dir = g_root + "/.tmp-ckpt";
  ::mkdir(dir.c_str(), 0755);
  ps::Shard shard;
  shard.owner_task = "/job:ps/task:0";
  shard.global_step = 1200;
  shard.tensors.push_back({"dense0/w", Iota(DType::kFloat32, {3, 2}), "/job:ps/task:0/device:CPU:0"});
  shard.tensors.push_back({"dense0/b", Iota(DType::kFloat32, {2}), ""});
  shard.tensors.push_back({"global_step", Iota(DType::kInt64, {}), ""});
  const std::string path = dir + "/ps-0.shard";
  auto info = ps::WriteShard(Env::Default(), path, shard);
  if (!info.ok()) Fail(std::string(info.status().message()));
  Put("shard_file_fuzzer", "three_tensors", Slurp(path));
  ps::Shard empty;
  empty.owner_task = "/job:ps/task:1";
  auto info1 = ps::WriteShard(Env::Default(), dir + "/ps-1.shard", empty);
  if (!info1.ok()) Fail(std::string(info1.status().message()));
  Put("shard_file_fuzzer", "no_tensors", Slurp(dir + "/ps-1.shard"));

  CheckpointManifest m;
  m.set_job_name("mnist");
  m.set_step(1200);
  m.set_wall_time_micros(1700000000000000);
  ManifestShard* s = m.add_shard();
  s->set_file("ps-0.shard");
  s->set_owner_task(shard.owner_task);
  s->set_size(info->size);
  s->set_crc32c(info->crc32c);
  s = m.add_shard();
  s->set_file("ps-1.shard");
  s->set_owner_task(empty.owner_task);
  s->set_size(info1->size);
  s->set_crc32c(info1->crc32c);
  if (!ps::WriteManifest(Env::Default(), dir, m).ok()) Fail("manifest");
  Put("manifest_fuzzer", "two_shards", Slurp(dir + "/MANIFEST"));
  CheckpointManifest none;
  none.set_job_name("j");
  if (!ps::WriteManifest(Env::Default(), dir, none).ok()) Fail("manifest");
  Put("manifest_fuzzer", "no_shards", Slurp(dir + "/MANIFEST"));
  DeleteRecursively(Env::Default(), dir).IgnoreError();
}

void Tensors() {
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"float_2x3", Iota(DType::kFloat32, {2, 3})},
      {"int64_scalar", Iota(DType::kInt64, {})},
      {"bool_4", Iota(DType::kBool, {4})},
      {"int32_empty_0x5", Iota(DType::kInt32, {0, 5})},
  };
  for (const auto& [name, t] : tensors) {
    TensorProto p;
    TensorToProto(t, &p);
    Put("tensor_proto_fuzzer", name, p.SerializeAsString());
    // Split seed 0: one piece. The fuzzer varies it.
    const std::string header = worker::EncodeRecvTensorHeader(t, false);
    Put("recv_tensor_fuzzer", name,
        std::string(1, '\0') + header + std::string(static_cast<const char*>(t.raw_data()), t.TotalBytes()));
  }
  Put("recv_tensor_fuzzer", "dead_no_value", std::string(1, '\x05') + worker::EncodeRecvTensorHeader(Tensor(), true));
  Put("recv_tensor_fuzzer", "error_reply",
      std::string(1, '\0') + worker::EncodeRecvTensorError(absl::AbortedError("step 3 was aborted")));

  collective::ChunkKey key;
  key.group_key = 1;
  key.instance_key = 7;
  key.step_id = 42;
  key.round = 1;
  key.chunk = 0;
  key.src_rank = 2;
  for (const auto& [name, t] : tensors) {
    collective::SendChunk chunk{t, static_cast<const char*>(t.raw_data()), t.TotalBytes()};
    grpc::ByteBuffer buf = collective::EncodeChunk(key, chunk);
    std::vector<grpc::Slice> slices;
    if (!buf.Dump(&slices).ok()) Fail("dump");
    std::string bytes(1, name == "float_2x3" ? '\x03' : '\0');
    for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    Put("chunk_fuzzer", name, bytes);
  }
}

void Graphs() {
  {
    Graph g;
    GraphBuilder b(&g);
    Output x = b.Placeholder(DType::kFloat32, {-1, 4}, "x");
    Output w = b.Variable("w", DType::kFloat32, {4, 3}, "glorot_uniform");
    Output y = b.Op("MatMul", {x, w});
    b.Op("Relu", {y});
    if (!b.status().ok()) Fail(std::string(b.status().message()));
    Put("graph_def_fuzzer", "mlp_layer", g.ToGraphDef().SerializeAsString());
  }
  {
    Graph g;
    GraphBuilder b(&g);
    Output c = b.Const(Iota(DType::kFloat32, {2, 2}), "c");
    Output s = b.ScalarConst(2.0f, "s");
    b.Op("Mul", {c, s});
    if (!b.status().ok()) Fail(std::string(b.status().message()));
    Put("graph_def_fuzzer", "const_mul", g.ToGraphDef().SerializeAsString());
  }
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus CORPUS_DIR\n");
    return 2;
  }
  weft::g_root = argv[1];
  ::mkdir(weft::g_root.c_str(), 0755);
  weft::Idx();
  weft::TFRecords();
  weft::Shards();
  weft::Tensors();
  weft::Graphs();
  return 0;
}
