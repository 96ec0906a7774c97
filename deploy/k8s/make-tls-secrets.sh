#!/usr/bin/env bash
# Makes a weft cluster's certificates with `weft certs` and the Secrets the
# manifests mount at /etc/weft/tls (deploy/README.md, "Security"):
#
#   deploy/k8s/make-tls-secrets.sh [options] DIR
#
# DIR keeps the CA (ca.crt, ca.key) and every certificate and key; keep it
# somewhere safe and out of the repository. The CA is made only when DIR has
# none, and a certificate only when DIR lacks it, so running the script again
# after scaling issues the new tasks' certificates from the same CA;
# --reissue issues every certificate again (rotation).
#
# Secrets, PREFIX-ROLE (default prefix weft-tls):
#   weft-tls-master   ca.crt master.crt master.key
#   weft-tls-worker   ca.crt worker-<i>.crt worker-<i>.key for every worker
#                     up to --max_workers
#   weft-tls-ps       ca.crt ps-<i>.crt ps-<i>.key for every ps
#   weft-tls-client   ca.crt client.crt client.key: the user --user, for the
#                     submit Job
#   weft-tls-prometheus  ca.crt prometheus.crt prometheus.key: the admin
#                     --prometheus, whose certificate Prometheus presents to
#                     the daemons' metrics ports (k8s/monitoring)
# A worker pod mounts every worker's key: a StatefulSet's pods share one
# template. deploy/README.md says how to give each pod only its own.
#
# Options:
#   --namespace=NS      the namespace the pods run in (default weft); each
#                       certificate names its pod's short and full DNS names
#   --cluster=SPEC      the tasks, as the ConfigMap's `cluster` (default: the
#                       one in deploy/k8s/base/configmap.yaml)
#   --master=HOST:PORT  the master's address (default: `master` there)
#   --max_workers=N     certificates for workers 0..N-1, so that a scale-up
#                       of the worker StatefulSet up to N pods needs no new
#                       Secret (default: `max-workers` there when the
#                       cluster is too, else the cluster's workers); those
#                       past the cluster are named
#                       as its worker 0 is, with their own ordinal
#   --user=NAME         the user the submit Job runs as (default weft-submit)
#   --role=ROLE         that user's role, user or admin (default user)
#   --prometheus=NAME   the admin Prometheus scrapes as (default prometheus):
#                       `weft certs issue DIR --name=NAME --role=admin`
#   --prefix=PREFIX     Secret names PREFIX-master, ... (default weft-tls)
#   --cluster_domain=D  the cluster's DNS domain (default cluster.local)
#   --reissue           issue every certificate again from the same CA
#   --apply             create or update the Secrets with kubectl; without
#                       it the commands are printed (pipe them to sh)
# The weft binary is $WEFT, or `weft` on PATH.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
configmap="$here/base/configmap.yaml"
weft=${WEFT:-weft}
namespace=weft
cluster=""
master=""
max_workers=""
user="weft-submit"
role=user
prometheus=prometheus
prefix="weft-tls"
domain=cluster.local
reissue=false
apply=false
dir=""

die() {
  echo "make-tls-secrets: $*" >&2
  exit 2
}

for arg in "$@"; do
  case "$arg" in
    --namespace=*) namespace=${arg#*=} ;;
    --cluster=*) cluster=${arg#*=} ;;
    --master=*) master=${arg#*=} ;;
    --max_workers=*) max_workers=${arg#*=} ;;
    --user=*) user=${arg#*=} ;;
    --role=*) role=${arg#*=} ;;
    --prometheus=*) prometheus=${arg#*=} ;;
    --prefix=*) prefix=${arg#*=} ;;
    --cluster_domain=*) domain=${arg#*=} ;;
    --reissue) reissue=true ;;
    --apply) apply=true ;;
    --*) die "unknown option $arg (see the comment at the top of $0)" ;;
    *) [[ -z "$dir" ]] || die "one DIR only, got $dir and $arg"; dir=$arg ;;
  esac
done
[[ -n "$dir" ]] || die "usage: $0 [--namespace=NS] [--cluster=SPEC] [--master=HOST:PORT] [--user=NAME] [--prometheus=NAME] [--prefix=P] [--reissue] [--apply] DIR"
[[ -n "$prometheus" ]] || die "--prometheus is empty"
[[ "$prometheus" != "$user" ]] || die "--prometheus and --user name the same certificate ($user); give Prometheus its own"
[[ "$role" == user || "$role" == admin ]] || die "--role must be user or admin, got $role"

# A key of the ConfigMap: `  key: "value"` on one line; "" when it has none.
configmap_optional() {
  sed -n "s/^  $1: \"\(.*\)\"\$/\1/p" "$configmap"
}
configmap_value() {
  local value
  value=$(configmap_optional "$1")
  [[ -n "$value" ]] || die "$configmap has no one-line \"$1\" key; pass --$1="
  echo "$value"
}
# max-workers goes with the ConfigMap's cluster, not with one given here.
if [[ -z "$cluster" ]]; then
  cluster=$(configmap_value cluster)
  [[ -n "$max_workers" ]] || max_workers=$(configmap_optional max-workers)
fi
[[ -n "$master" ]] || master=$(configmap_value master)
[[ -z "$max_workers" || "$max_workers" =~ ^[0-9]{1,4}$ ]] ||
  die "--max_workers must be a count of workers (0 to 9999), got '$max_workers'"

# The names a peer may dial a pod by: the address's host as the cluster spec
# has it (weft-worker-0.weft-worker, or TF_CONFIG's NAME.NS.svc), its fully
# qualified form, and localhost for clients inside the pod.
hosts_of() {
  local host=${1%:*}
  case "$host" in
    *.svc) echo "$host,$host.$domain,localhost" ;;
    *.svc.*) echo "$host,localhost" ;;
    *) echo "$host,$host.$namespace.svc,$host.$namespace.svc.$domain,localhost" ;;
  esac
}

mkdir -p "$dir"
chmod 700 "$dir"
if [[ ! -f "$dir/ca.crt" ]]; then
  "$weft" certs init "$dir" >&2
fi

# issue NAME FILE_STEM [weft certs issue flags...]
issue() {
  local name=$1 stem=$2
  shift 2
  if $reissue || [[ ! -f "$dir/$stem.crt" || ! -f "$dir/$stem.key" ]]; then
    rm -f "$dir/$stem.crt" "$dir/$stem.key"
    "$weft" certs issue "$dir" --name="$name" "$@" >&2
    [[ -f "$dir/$stem.crt" && -f "$dir/$stem.key" ]] ||
      die "weft certs issue --name=$name wrote no $dir/$stem.crt and $dir/$stem.key"
  fi
}

# The kubectl command that creates or updates Secret $1 from the files
# KEY=PATH that follow: apply, so that running it again replaces the keys.
secret() {
  local name=$1
  shift
  local cmd=(kubectl -n "$namespace" create secret generic "$name")
  local f
  for f in "$@"; do cmd+=("--from-file=$f"); done
  cmd+=(--dry-run=client -o yaml)
  if $apply; then
    "${cmd[@]}" | kubectl -n "$namespace" apply -f -
  else
    printf '%q ' "${cmd[@]}"
    printf '| kubectl -n %q apply -f -\n' "$namespace"
  fi
}

issue master master --role=cluster --hosts="$(hosts_of "$master")"
secret "$prefix-master" "ca.crt=$dir/ca.crt" "master.crt=$dir/master.crt" "master.key=$dir/master.key"

# cluster: JOB=ADDR,ADDR;JOB=...; task i of JOB is /job:JOB/task:i.
IFS=';' read -r -a jobs <<<"$cluster"
for spec in "${jobs[@]}"; do
  [[ -n "$spec" ]] || continue
  job=${spec%%=*}
  [[ "$job" != "$spec" && -n "$job" ]] || die "--cluster: '$spec' is not JOB=HOST:PORT,..."
  IFS=',' read -r -a addrs <<<"${spec#*=}"
  files=("ca.crt=$dir/ca.crt")
  for i in "${!addrs[@]}"; do
    issue "/job:$job/task:$i" "$job-$i" --role=cluster --hosts="$(hosts_of "${addrs[$i]}")"
    files+=("$job-$i.crt=$dir/$job-$i.crt" "$job-$i.key=$dir/$job-$i.key")
  done
  # Workers past the cluster, for a scale-up: their pods register with the
  # master at their StatefulSet names, worker 0's with their own ordinal.
  if [[ "$job" == worker && -n "$max_workers" && "$max_workers" -gt "${#addrs[@]}" ]]; then
    first=${addrs[0]}
    [[ "$first" == *-0.* ]] ||
      die "--max_workers: worker 0's address '$first' is not a StatefulSet name (NAME-0.SERVICE:PORT)"
    for ((i = ${#addrs[@]}; i < max_workers; i++)); do
      issue "/job:$job/task:$i" "$job-$i" --role=cluster --hosts="$(hosts_of "${first/-0./-$i.}")"
      files+=("$job-$i.crt=$dir/$job-$i.crt" "$job-$i.key=$dir/$job-$i.key")
    done
  fi
  secret "$prefix-$job" "${files[@]}"
done

issue "$user" "$user" --role="$role"
secret "$prefix-client" "ca.crt=$dir/ca.crt" "client.crt=$dir/$user.crt" "client.key=$dir/$user.key"

# Prometheus reads the metrics ports as an admin: they serve admins and
# cluster members alone. The NetworkPolicies keep it off the master's API.
issue "$prometheus" "$prometheus" --role=admin
secret "$prefix-prometheus" "ca.crt=$dir/ca.crt" "prometheus.crt=$dir/$prometheus.crt" \
  "prometheus.key=$dir/$prometheus.key"
