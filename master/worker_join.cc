#include "master/worker_join.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cluster_spec.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace weft {
namespace master {

void WorkerJoins::Join(const Caller& caller, const RegisterWorkerRequest* request, RegisterWorkerResponse* response,
                       StatusCallback done) {
  constexpr char kWhat[] = "MasterService.RegisterWorker";
  if (absl::Status s = RequireClusterMember(caller, kWhat); !s.ok()) return done(s);
  const std::string& task = request->task();
  if (!caller.insecure() && caller.name != task) {
    return done(absl::PermissionDeniedError(absl::StrCat(kWhat, " registers the caller only; ", caller.Describe(),
                                                         " may not register '", task.substr(0, 200), "'")));
  }
  // The task name and address are checked before anything is dialled.
  if (absl::Status s = JoiningWorkerIndex(task).status(); !s.ok()) return done(s);
  if (absl::Status s = CheckHostPort(request->address(), absl::StrCat("task ", task)); !s.ok()) return done(s);
  // The periodic calls of a worker already in at that address: checked
  // when it joined, nothing to do again.
  if (workers_->Knows(task, request->address())) {
    response->set_added(false);
    response->set_tasks(static_cast<int32_t>(workers_->ListTasks().size()));
    return done(absl::OkStatus());
  }
  std::shared_ptr<WorkerInterface> client(workers_->NewClient(task, request->address()));
  if (client == nullptr) {
    return done(absl::UnimplementedError(absl::StrCat("task ", task.substr(0, 200),
                                                      " cannot join: this master's tasks are fixed")));
  }
  {
    absl::MutexLock lock(&mu_);
    if (in_flight_ >= kMaxInFlight) {
      return done(absl::ResourceExhaustedError(absl::StrCat("task ", task.substr(0, 200), " cannot join now: ",
                                                            kMaxInFlight, " joins are being checked")));
    }
    ++in_flight_;
  }
  struct Call {
    GetStatusRequest request;
    GetStatusResponse response;
  };
  auto call = std::make_shared<Call>();
  client->GetStatusAsync(&call->request, &call->response,
                         [this, client, call, request, response, done = std::move(done)](const absl::Status& s) {
                           Checked(s, call->response, request, response, done);
                           absl::MutexLock lock(&mu_);
                           --in_flight_;
                         });
}

WorkerJoins::~WorkerJoins() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &in_flight_));
}

void WorkerJoins::Checked(const absl::Status& s, const GetStatusResponse& status, const RegisterWorkerRequest* request,
                          RegisterWorkerResponse* response, const StatusCallback& done) {
  const std::string& task = request->task();
  const std::string& address = request->address();
  if (!s.ok()) {
    return done(absl::UnavailableError(
        absl::StrCat("task ", task, " cannot join: the master cannot reach it at ", address, ": ", s.message())));
  }
  if (status.task() != task) {
    return done(absl::FailedPreconditionError(absl::StrCat("task ", task, " cannot join at ", address,
                                                           ": the task there is '", status.task().substr(0, 200),
                                                           "'")));
  }
  absl::StatusOr<bool> added = workers_->AddTask(task, address);
  if (!added.ok()) return done(added.status());
  response->set_added(*added);
  response->set_tasks(static_cast<int32_t>(workers_->ListTasks().size()));
  if (*added) Logger("master")->info("task {} joined the cluster at {} ({} tasks)", task, address, response->tasks());
  done(absl::OkStatus());
}

}  // namespace master
}  // namespace weft
