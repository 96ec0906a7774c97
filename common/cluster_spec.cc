#include "common/cluster_spec.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace weft {
namespace {

absl::Status CheckJobName(absl::string_view name, absl::string_view where) {
  bool ok = !name.empty() && name[0] >= 'a' && name[0] <= 'z';
  for (char c : name) ok &= (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": job name '", name, "' must be lowercase letters, digits or '_', starting with a letter"));
  }
  return absl::OkStatus();
}

JobDef* AddJob(ClusterDef* cluster, absl::string_view name) {
  JobDef* job = cluster->add_job();
  job->set_name(std::string(name));
  return job;
}

}  // namespace

absl::Status CheckHostPort(absl::string_view address, absl::string_view where) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": '", absl::CHexEscape(address.substr(0, 300)),
                                                   "' is not host:port: ", why));
  };
  if (address.size() > 300) return bad("longer than 300 bytes");
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return bad("no port");
  absl::string_view host = address.substr(0, colon);
  const absl::string_view digits = address.substr(colon + 1);
  int port = 0;
  if (digits.empty() || digits.find_first_not_of("0123456789") != absl::string_view::npos ||
      !absl::SimpleAtoi(digits, &port) || port < 1 || port > 65535) {
    return bad("the port is not 1..65535");
  }
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]") && host.size() >= 2) {
    host = host.substr(1, host.size() - 2);
    if (host.empty() || host.find_first_not_of("0123456789abcdefABCDEF:.") != absl::string_view::npos) {
      return bad("not an IPv6 address in brackets");
    }
    return absl::OkStatus();
  }
  if (host.empty() || host.size() > 253) return bad("the host is empty or longer than 253 bytes");
  if (host.find(':') != absl::string_view::npos) return bad("an IPv6 host goes in brackets, as [::1]:PORT");
  if (host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") !=
          absl::string_view::npos ||
      host.front() == '-' || host.front() == '.') {
    return bad("the host is neither a DNS name nor an IP address");
  }
  return absl::OkStatus();
}

std::string AddressHost(absl::string_view address) {
  const size_t colon = address.rfind(':');
  absl::string_view host = address.substr(0, colon == absl::string_view::npos ? address.size() : colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return std::string(host);
}

std::string TaskSpec::Name() const { return absl::StrCat("/job:", job, "/task:", index); }

absl::StatusOr<ClusterDef> ParseClusterFlag(absl::string_view flag) {
  ClusterDef cluster;
  if (absl::StripAsciiWhitespace(flag).empty()) return absl::InvalidArgumentError("--cluster is empty");
  for (absl::string_view part : absl::StrSplit(flag, ';', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    const size_t eq = part.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--cluster: '", part, "' is not job=host:port[,host:port...]"));
    }
    const absl::string_view name = part.substr(0, eq);
    RETURN_IF_ERROR(CheckJobName(name, "--cluster"));
    for (const JobDef& j : cluster.job()) {
      if (j.name() == name) return absl::InvalidArgumentError(absl::StrCat("--cluster: job '", name, "' repeats"));
    }
    JobDef* job = AddJob(&cluster, name);
    int index = 0;
    for (absl::string_view addr : absl::StrSplit(part.substr(eq + 1), ',')) {
      addr = absl::StripAsciiWhitespace(addr);
      RETURN_IF_ERROR(CheckHostPort(addr, absl::StrCat("--cluster job '", name, "' task ", index)));
      (*job->mutable_tasks())[index++] = std::string(addr);
    }
  }
  return cluster;
}

absl::StatusOr<TaskSpec> ParseTaskFlag(absl::string_view flag) {
  TaskSpec t;
  std::string job;
  absl::string_view index;
  if (absl::ConsumePrefix(&flag, "/job:")) {
    const size_t slash = flag.find("/task:");
    if (slash == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--task: '/job:", flag, "' lacks /task:N"));
    }
    job = std::string(flag.substr(0, slash));
    index = flag.substr(slash + 6);
  } else {
    const size_t colon = flag.find(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("--task: '", flag, "' is not job:index (e.g. worker:0)"));
    }
    job = std::string(flag.substr(0, colon));
    index = flag.substr(colon + 1);
  }
  RETURN_IF_ERROR(CheckJobName(job, "--task"));
  if (!absl::SimpleAtoi(index, &t.index) || t.index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--task: task index '", index, "' is not a non-negative integer"));
  }
  t.job = job;
  return t;
}

absl::StatusOr<ClusterConfig> ParseTfConfig(absl::string_view json) {
  google::protobuf::Struct root;
  auto s = google::protobuf::util::JsonStringToMessage(std::string(json), &root);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG is not valid JSON: ", s.message().as_string()));
  ClusterConfig config;
  auto cluster_it = root.fields().find("cluster");
  if (cluster_it == root.fields().end() || !cluster_it->second.has_struct_value()) {
    return absl::InvalidArgumentError("TF_CONFIG: \"cluster\" must be an object of job -> [\"host:port\", ...]");
  }
  // Struct fields are a map; keep a stable order by name.
  std::vector<std::string> names;
  for (const auto& [name, value] : cluster_it->second.struct_value().fields()) names.push_back(name);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const auto& value = cluster_it->second.struct_value().fields().at(name);
    RETURN_IF_ERROR(CheckJobName(name, "TF_CONFIG cluster"));
    if (!value.has_list_value()) {
      return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG: cluster.", name, " must be a list of \"host:port\""));
    }
    JobDef* job = AddJob(&config.cluster, name);
    int index = 0;
    for (const auto& v : value.list_value().values()) {
      if (!v.has_string_value()) {
        return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG: cluster.", name, "[", index, "] must be a string"));
      }
      RETURN_IF_ERROR(CheckHostPort(v.string_value(), absl::StrCat("TF_CONFIG cluster.", name, "[", index, "]")));
      (*job->mutable_tasks())[index++] = v.string_value();
    }
  }
  auto task_it = root.fields().find("task");
  if (task_it != root.fields().end()) {
    if (!task_it->second.has_struct_value()) return absl::InvalidArgumentError("TF_CONFIG: \"task\" must be an object");
    const auto& fields = task_it->second.struct_value().fields();
    auto type = fields.find("type");
    auto index = fields.find("index");
    if (type == fields.end() || !type->second.has_string_value()) {
      return absl::InvalidArgumentError("TF_CONFIG: task.type must be a string");
    }
    if (index == fields.end() || !index->second.has_number_value() || index->second.number_value() < 0 ||
        index->second.number_value() != static_cast<int>(index->second.number_value())) {
      return absl::InvalidArgumentError("TF_CONFIG: task.index must be a non-negative integer");
    }
    config.task.job = type->second.string_value();
    config.task.index = static_cast<int>(index->second.number_value());
    RETURN_IF_ERROR(TaskAddress(config.cluster, config.task).status());
  }
  return config;
}

absl::Status CheckClusterDef(const ClusterDef& cluster, absl::string_view where) {
  for (int i = 0; i < cluster.job_size(); ++i) {
    const JobDef& job = cluster.job(i);
    RETURN_IF_ERROR(CheckJobName(job.name(), where));
    for (int j = 0; j < i; ++j) {
      if (cluster.job(j).name() == job.name()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": job '", job.name(), "' repeats"));
      }
    }
    for (const auto& [index, address] : job.tasks()) {
      if (index < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": job '", job.name(), "' has a negative task index ", index));
      }
      RETURN_IF_ERROR(CheckHostPort(address, absl::StrCat(where, " job '", job.name(), "' task ", index)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TaskAddress(const ClusterDef& cluster, const TaskSpec& task) {
  for (const JobDef& j : cluster.job()) {
    if (j.name() != task.job) continue;
    auto it = j.tasks().find(task.index);
    if (it != j.tasks().end()) return it->second;
    return absl::NotFoundError(
        absl::StrCat("task ", task.Name(), " is not in the cluster: job '", task.job, "' has ", j.tasks_size(), " task(s)"));
  }
  return absl::NotFoundError(absl::StrCat("task ", task.Name(), " is not in the cluster: no job '", task.job, "'"));
}

int NumTasks(const ClusterDef& cluster, absl::string_view job) {
  for (const JobDef& j : cluster.job()) {
    if (j.name() == job) return j.tasks_size();
  }
  return 0;
}

std::string ClusterToFlag(const ClusterDef& cluster) {
  std::vector<std::string> parts;
  for (const JobDef& j : cluster.job()) {
    std::vector<std::string> addrs;
    for (int i = 0; i < j.tasks_size(); ++i) {
      auto it = j.tasks().find(i);
      addrs.push_back(it == j.tasks().end() ? std::string() : it->second);
    }
    parts.push_back(absl::StrCat(j.name(), "=", absl::StrJoin(addrs, ",")));
  }
  return absl::StrJoin(parts, ";");
}

}  // namespace weft
