// `weft submit | jobs | status | cancel | devices`: the job commands, over
// the MasterService. Also FollowJob, which `weft local` shares.
//
// The master's address comes from --master=HOST:PORT or $WEFT_MASTER.
// Exit status: 0 on success (for a followed job: it SUCCEEDED), 1 when the
// call or the job failed, 2 for bad usage.
#ifndef WEFT_CLIENT_JOB_COMMANDS_H_
#define WEFT_CLIENT_JOB_COMMANDS_H_

#include <string>

#include "client/master_client.h"
#include "proto/master_service.pb.h"
#include "runtime/trainer.h"

namespace weft {

int RunSubmitCommand(int argc, char** argv);
int RunJobsCommand(int argc, char** argv);
int RunStatusCommand(int argc, char** argv);
int RunCancelCommand(int argc, char** argv);
int RunDevicesCommand(int argc, char** argv);

// Watches `job_id` to its end with a progress display on stderr, then prints
// the result (one JSON object with `json`, the one `weft train` prints).
// Returns the exit status.
int FollowJob(MasterClient* client, const std::string& job_id, bool json);

// The figures of a finished job, as `weft train` reports them.
TrainResult ResultFromStatus(const JobStatus& s);

}  // namespace weft

#endif  // WEFT_CLIENT_JOB_COMMANDS_H_
