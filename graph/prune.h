// Pruning: the subgraph that one kind of step needs.
//
// PruneGraph keeps the nodes that the fetched tensors and the target nodes
// depend on, following data and control inputs backwards, and cuts the walk
// at fed tensors: each feed "name:k" becomes a Placeholder named
// FeedNodeName("name:k") ("_feed/name_k") with the original output's dtype
// and shape and the producer's requested device, and every kept consumer of
// that tensor reads the placeholder instead. So a producer that only fed
// tensors needed is dropped, with everything upstream of it that nothing else
// needs. When the fed node is itself a Placeholder its outgoing control
// edges move to the feed placeholder too (as in TensorFlow), so an unfed
// original does not linger.
//
// A placeholder is made for every feed, used or not, so the caller can feed
// every tensor it listed. A fetch of a fed tensor is served by its feed
// placeholder: fetch FeedNodeName(t) from the pruned graph.
//
// Kept nodes keep their names, NodeDefs (inputs rewritten as above) and
// assigned devices; the result is a valid Graph in the original's relative
// order.
//
// Errors (INVALID_ARGUMENT) name the unknown or malformed feed, fetch or
// target, and the empty request (no fetches and no targets).
//
// Thread-safety: pure functions; `in` is only read.
#ifndef WEFT_GRAPH_PRUNE_H_
#define WEFT_GRAPH_PRUNE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "graph/graph.h"

namespace weft {

// feeds, fetches: tensor names ("name" or "name:k"); targets: node names.
absl::Status PruneGraph(const Graph& in, const std::vector<std::string>& feeds,
                        const std::vector<std::string>& fetches, const std::vector<std::string>& targets,
                        std::unique_ptr<Graph>* out);

// The placeholder that replaces fed tensor "name:k" (or "name", meaning
// "name:0"): "_feed/name_k". REQUIRES: `tensor_name` parses as a tensor name.
std::string FeedNodeName(absl::string_view tensor_name);

}  // namespace weft

#endif  // WEFT_GRAPH_PRUNE_H_
