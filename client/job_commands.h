// `weft submit | jobs | status | cancel | devices`: the job commands, over
// the MasterService. Also FollowJob, which `weft local` shares.
//
// The master's address comes from --master=HOST:PORT or $WEFT_MASTER.
// Exit status: 0 on success (for a followed job: it SUCCEEDED), 1 when the
// call or the job failed, 2 for bad usage.
//
//   weft submit JOB [--follow] [--output=text|json] [--resume_from=DIR]
//                   [--master_wait_seconds=S]
#ifndef WEFT_CLIENT_JOB_COMMANDS_H_
#define WEFT_CLIENT_JOB_COMMANDS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/grpc_master_client.h"
#include "proto/master_service.pb.h"
#include "runtime/trainer.h"

namespace weft {

int RunSubmitCommand(int argc, char** argv);
int RunJobsCommand(int argc, char** argv);
int RunStatusCommand(int argc, char** argv);
int RunCancelCommand(int argc, char** argv);
// weft scale ID --workers=N: an elastic job's size from its next step on.
int RunScaleCommand(int argc, char** argv);
// `weft trace ID [--steps=N] [--out=FILE]`: the job's next N steps on every
// task as Chrome trace JSON (master/trace_merge.h).
int RunTraceCommand(int argc, char** argv);
int RunDevicesCommand(int argc, char** argv);

// Watches `job_id` to its end with a progress display on stderr, then prints
// the result (one JSON object with `json`, the one `weft train` prints).
// A master that goes away (UNAVAILABLE) is waited for, up to `master_wait`
// at a time, and the same job followed again once it is back: a master
// restarted with --state_dir resumes its jobs under the same ids.
// Returns the exit status.
int FollowJob(MasterClient* client, const std::string& job_id, bool json,
              absl::Duration master_wait = absl::Seconds(120));

// `--resume_from=DIR`: sets the job's checkpoint().resume_from to DIR made
// absolute. INVALID_ARGUMENT naming DIR when it is not a directory.
absl::Status SetResumeFrom(const std::string& dir, JobSpec* job);

// The figures of a finished job, as `weft train` reports them.
TrainResult ResultFromStatus(const JobStatus& s);

}  // namespace weft

#endif  // WEFT_CLIENT_JOB_COMMANDS_H_
