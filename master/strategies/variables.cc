#include "master/strategies/variables.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace weft {
namespace master {
namespace strategies {
namespace {

// Shards of one update, written to `out`; records each row-split variable's
// shards in `parts_of`.
void AddShards(const Rewrite& rw, const Update& u, int64_t rows, int64_t shards, GraphDef* out,
               absl::flat_hash_map<std::string, std::vector<std::string>>* parts_of) {
  int64_t offset = 0;
  for (int64_t s = 0; s < shards; ++s) {
    const int64_t n = rows / shards + (s < rows % shards ? 1 : 0);
    const std::string suffix = absl::StrCat("/part_", s);
    NodeDef* update = out->add_node();
    *update = *u.node;
    update->set_name(u.node->name() + suffix);
    for (size_t i = 0; i < u.vars.size(); ++i) {
      const NodeDef& v = *rw.by_name.at(u.vars[i]);
      auto vshape = GetShapeAttr(v, "shape");
      NodeDef* part = out->add_node();
      *part = v;
      part->set_name(v.name() + suffix);
      if (vshape.ok() && vshape->rank() >= 1 && vshape->dim(0) == rows) {
        std::vector<int64_t> dims(vshape->dims().begin(), vshape->dims().end());
        dims[0] = n;
        Rewrite::SetAttr(part, Attr("shape", TensorShape(dims)));
        Rewrite::SetAttr(part, Attr("init_shape", *vshape));
        Rewrite::SetAttr(part, Attr("row_offset", offset));
        Rewrite::SetAttr(part, Attr("init_name", v.name()));
        (*parts_of)[v.name()].push_back(part->name());
      }
      update->set_input(static_cast<int>(i), part->name());
    }
    NodeDef* slice = out->add_node();
    slice->set_name(update->name() + "/grad");
    slice->set_op("SliceRows");
    slice->add_input(u.grad);
    Rewrite::SetAttr(slice, Attr("begin", offset));
    Rewrite::SetAttr(slice, Attr("size", n));
    update->set_input(u.grad_input, slice->name());
    offset += n;
  }
}

}  // namespace

std::map<std::string, std::string> SpreadVariables(const Rewrite& rw) {
  // Union the variables that one update writes, so they stay together.
  std::map<std::string, std::string> parent;
  std::function<std::string(const std::string&)> find = [&](const std::string& v) {
    auto it = parent.find(v);
    if (it == parent.end() || it->second == v) return v;
    return it->second = find(it->second);
  };
  for (const std::string& v : rw.variables) parent[v] = v;
  for (const Update& u : rw.updates) {
    for (size_t i = 1; i < u.vars.size(); ++i) parent[find(u.vars[i])] = find(u.vars[0]);
  }
  std::map<std::string, std::pair<int64_t, std::vector<std::string>>> groups;
  for (const std::string& v : rw.variables) {
    auto& g = groups[find(v)];
    g.first += VariableBytes(*rw.by_name.at(v));
    g.second.push_back(v);
  }
  std::vector<std::pair<int64_t, std::vector<std::string>>> order;
  for (auto& [root, g] : groups) order.push_back(g);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  const std::vector<std::string>& devices = rw.options.variable_devices;
  std::vector<int64_t> load(devices.size(), 0);
  std::map<std::string, std::string> device_of;
  for (const auto& [bytes, vars] : order) {
    const size_t d = std::min_element(load.begin(), load.end()) - load.begin();
    load[d] += bytes;
    for (const std::string& v : vars) device_of[v] = devices[d];
  }
  return device_of;
}

absl::Status ShardLargeVariables(Rewrite* rw) {
  const int64_t max_bytes = rw->options.max_shard_bytes;
  if (max_bytes <= 0) return absl::OkStatus();
  absl::flat_hash_map<std::string, std::vector<std::string>> parts_of;  // var -> its shard variables
  absl::flat_hash_set<std::string> drop;  // replaced variables and updates
  GraphDef out;
  for (const Update& u : rw->updates) {
    const NodeDef& var = *rw->by_name.at(u.vars[0]);
    auto shape = GetShapeAttr(var, "shape");
    if (!shape.ok() || shape->rank() < 1 || u.bytes <= max_bytes) continue;
    const int64_t rows = shape->dim(0);
    // u.bytes > max_bytes > 0, so the ceiling cannot overflow.
    const int64_t shards = std::min<int64_t>(rows, (u.bytes - 1) / max_bytes + 1);
    if (shards < 2) continue;
    drop.insert(u.node->name());
    for (const std::string& v : u.vars) drop.insert(v);
    AddShards(*rw, u, rows, shards, &out, &parts_of);
  }
  if (drop.empty()) return absl::OkStatus();
  // Readers of a split variable read its stacked shards.
  for (const auto& [var, parts] : parts_of) {
    NodeDef* concat = out.add_node();
    concat->set_name(var + "/stacked");
    concat->set_op("ConcatRows");
    for (const std::string& p : parts) concat->add_input(p);
    rw->sharded[var] = parts;
  }
  for (const NodeDef& nd : rw->in_def.node()) {
    if (drop.contains(nd.name())) continue;
    NodeDef* c = out.add_node();
    *c = nd;
    for (std::string& in : *c->mutable_input()) {
      in = RenameInputNode(in, [&](const std::string& s) { return parts_of.contains(s) ? s + "/stacked" : s; });
    }
  }
  return rw->ResetInput(std::move(out));
}

}  // namespace strategies
}  // namespace master
}  // namespace weft
