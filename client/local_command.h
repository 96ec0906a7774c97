// `weft local --workers=N --ps=M [JOB] [--output=json] [--log_dir=DIR]`
//
// Starts a real cluster on this machine: one master, N workers and M
// parameter servers, each a `weft` process on a free 127.0.0.1 port, with
// logs in DIR (a new temporary folder by default). Waits until the master
// sees every task, then submits JOB and follows it to the end, printing the
// same result as `weft submit --follow`. Without JOB it serves until Ctrl-C.
// Every process is stopped on the way out, on Ctrl-C (which cancels the job
// first), and even if this process is killed (children die with it).
#ifndef WEFT_CLIENT_LOCAL_COMMAND_H_
#define WEFT_CLIENT_LOCAL_COMMAND_H_

namespace weft {

int RunLocalCommand(int argc, char** argv);

}  // namespace weft

#endif  // WEFT_CLIENT_LOCAL_COMMAND_H_
