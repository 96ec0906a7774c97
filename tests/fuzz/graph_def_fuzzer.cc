// Fuzzes what a worker does with the GraphDef of a RegisterGraph request
// before it runs anything: parse the proto, build the Graph (which resolves
// every input and runs every op's shape function), and turn it back into a
// GraphDef. A graph from the network must never crash the worker.
#include <cstddef>
#include <cstdint>

#include "graph/graph.h"
#include "proto/graph.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  weft::GraphDef def;
  if (!def.ParseFromArray(data, static_cast<int>(size))) return 0;
  auto graph = weft::Graph::FromGraphDef(def);
  if (graph.ok()) (*graph)->ToGraphDef();
  return 0;
}
