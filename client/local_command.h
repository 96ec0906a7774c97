// `weft local --workers=N --ps=M [JOB] [--output=json] [--log_dir=DIR]`
//
// Starts a real cluster on this machine: one master, N workers and M
// parameter servers, each a `weft` process on 127.0.0.1, with logs in DIR (a
// new temporary folder by default). Each binds port 0 and reports the port
// the kernel gave it in DIR/<name>.port (--port_file): the tasks start first,
// knowing only themselves, then the master with every task's address, which
// it sends on to the tasks. Waits until the master sees every task, then
// submits JOB and follows it to the end, printing the same result as `weft
// submit --follow`. Without JOB it serves until Ctrl-C. Every process is
// stopped on the way out, on Ctrl-C (which cancels the job first), and even
// if this process is killed (children die with it).
//
// Fault tolerance: a task that exits while the cluster runs (a crash, kill
// -9, the OOM killer) is started again with the same command line on the
// port it had, so at the same address, appending to the same log, up to
// --max_restarts times per task (default 10; 0: never). The master keeps its
// jobs in DIR/master-state so that a restarted master resumes them, and the
// client waits up to --master_wait_seconds (default 120) for it.
// DIR/tasks.txt lists each task as `name pid address`, rewritten whenever a
// task restarts.
// --resume_from=CKPT_DIR starts JOB from a checkpoint, as with `weft submit`.
#ifndef WEFT_CLIENT_LOCAL_COMMAND_H_
#define WEFT_CLIENT_LOCAL_COMMAND_H_

namespace weft {

int RunLocalCommand(int argc, char** argv);

}  // namespace weft

#endif  // WEFT_CLIENT_LOCAL_COMMAND_H_
