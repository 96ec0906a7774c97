// `weft checkpoints DIR [--output=text|json]`: the checkpoints under a job's
// checkpoint directory (CheckpointPolicy.dir), newest first, each checked
// against its manifest the way a restore checks it (ps/checkpoint_index.h).
//
// Text: one line per checkpoint directory: step, UTC time of the manifest
// (ISO 8601), shard files, total bytes, path, and for an invalid one
// "INVALID: <problem>" naming the file at fault. JSON: one array of objects
// {"step", "path", "valid", "time", "wall_time_micros", "job", "shards",
// "bytes", "problem"}, null where not known.
//
// Exit status: 0 when at least one checkpoint is valid, 1 when none is (or
// DIR cannot be read), 2 for bad usage. Reads only; deletes nothing.
#ifndef WEFT_CLIENT_CHECKPOINTS_COMMAND_H_
#define WEFT_CLIENT_CHECKPOINTS_COMMAND_H_

namespace weft {

int RunCheckpointsCommand(int argc, char** argv);

}  // namespace weft

#endif  // WEFT_CLIENT_CHECKPOINTS_COMMAND_H_
