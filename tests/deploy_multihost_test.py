#!/usr/bin/env python3
"""weft's Kubernetes manifests run as a multi-host cluster, without Kubernetes.

Each pod of the rendered cpu overlay (master, workers, ps, and the submit
Job) runs as a separate "host": its own network namespace with its own
10.x address on a bridge, its StatefulSet host name (UTS namespace), and
name resolution for the StatefulSet DNS names (weft-worker-0.weft-worker...)
through a hosts file bind-mounted over /etc/hosts in the pod's own mount
namespace, so the daemons resolve names through the system resolver as in
a cluster. The bridge lives in a namespace of its own: nothing here touches
the host's network.

Each container's command, args and env are taken from the rendered
manifests; only what Kubernetes itself would supply is substituted: $(VAR)
from env, ConfigMap keys, the downward API (metadata.name, the pod-index
label) and volumes (each mountPath becomes a directory of this test: the
checkpoint claim one shared directory, the master's claim its own, each
Secret a directory of its keys). The Secrets are made as deploy/README.md
says, by deploy/k8s/make-tls-secrets.sh running this `weft certs`, so the
daemons speak mutual TLS with the certificates, names and paths a real
deployment has. The image's dataset directory (--data_root) holds a small
synthetic dataset, and the example job is replaced by a small one on it.

The job is submitted by the submit Job's containers; once it has written a
checkpoint, worker 1 is SIGKILLed and started again under the same name and
address (as the StatefulSet controller would), and the job must still
SUCCEED, with a recovery recorded. An elastic MULTI_WORKER_MIRRORED job is
scaled from two workers to one and back with `weft scale`, then onto a
worker pod past the cluster string (the one `kubectl scale` would add),
which registers with the master itself. Then, from the
submit pod: every daemon's health port answers a plaintext gRPC health check SERVING (what the
kubelet's probe sends), the master's own port does not answer one (it is
mTLS-only), and `weft jobs` without a client certificate is refused. Every
daemon's metrics port is scraped as deploy/k8s/monitoring's ServiceMonitor
has Prometheus scrape it (HTTPS, the weft-tls-prometheus admin certificate,
its serverName): /metrics answers 200 in the Prometheus text format, while a
user's certificate gets 403, and neither a client without a certificate nor
plain HTTP gets a page. The
test is reported skipped, saying why, where namespaces cannot be created
(not root, no `ip`/`unshare`, no CAP_NET_ADMIN). The manifests are rendered
with `kubectl kustomize` (deploy/check/render.py).

Run with pytest (tests/deploy_multihost_test.sh does, under Bazel), as root:

    WEFT_REPO_ROOT=. WEFT=bazel-bin/client/weft python3 -m pytest -s tests/deploy_multihost_test.py

WEFT_REPO_ROOT defaults to the current directory; WEFT to the repository's
client/weft, else bazel-bin/client/weft.
"""
import gzip
import inspect
import json
import os
import random
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.abspath(os.environ.get("WEFT_REPO_ROOT") or ".")
sys.path.insert(0, os.path.join(ROOT, "deploy", "check"))
import render  # noqa: E402

DEADLINE_S = 240  # the job's waits; a healthy run ends far inside
# The whole test, set-up and teardown included: inside the 280 s of
# tests/deploy_multihost_test.sh, so that a hung run fails as this test, with
# its pods' logs, and leaves no namespace behind.
ALARM_S = 265
SUBNET = "10.%d.%d" % (random.randint(64, 127), random.randint(1, 254))
TAG = "wt%d" % os.getpid()
VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
DATA_ROOT = "/usr/share/datasets"  # in the image: the daemons' --data_root


def log(msg):
    print("[multihost] " + msg, flush=True)


def run(*cmd, check=True):
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True)


def write_idx_data(d, n=480):
    """The synthetic 3-class problem of tests/fault_test.cc, as gzipped IDX."""
    os.makedirs(d, exist_ok=True)
    r = 12345
    pixels, labels = bytearray(), bytearray()
    for i in range(n):
        c = i % 3
        labels.append(c)
        for p in range(12):
            r = (r * 1103515245 + 12345) & 0xFFFFFFFF
            pixels.append((170 if p // 4 == c else 20) + (r >> 24) % 60)
    for split in ("train", "t10k"):
        with gzip.open(os.path.join(d, split + "-images-idx3-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">IIII", 0x0803, n, 3, 4) + bytes(pixels))
        with gzip.open(os.path.join(d, split + "-labels-idx1-ubyte.gz"), "wb") as f:
            f.write(struct.pack(">II", 0x0801, n) + bytes(labels))


def grpc_health_status(host, port, timeout=5.0):
    """The status a plaintext grpc.health.v1.Health/Check for the server returns (1: SERVING).

    What Kubernetes' gRPC probe sends: HTTP/2 with prior knowledge, no TLS,
    over a raw socket (this machine's Python has no gRPC). Raises when the
    port does not answer it: closed, TLS, or no response message. Runs in a
    pod's network namespace as `python3 -c` with its own source, so it
    imports what it needs itself.
    """
    import socket
    import struct as st

    def frame(ftype, flags, stream, payload=b""):
        return st.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + st.pack(">I", stream) + payload

    def literal(name, value):  # HPACK: literal without indexing, new name, no Huffman
        return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value

    headers = b"".join(literal(k, v) for k, v in (
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/grpc.health.v1.Health/Check"),
        (b":authority", ("%s:%d" % (host, port)).encode()), (b"content-type", b"application/grpc"),
        (b"te", b"trailers")))
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0) + frame(1, 0x4, 1, headers)
                 + frame(0, 0x1, 1, b"\x00\x00\x00\x00\x00"))  # an empty HealthCheckRequest
    buf, data = b"", b""
    while True:
        while len(buf) < 9 or len(buf) < 9 + int.from_bytes(buf[:3], "big"):
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("%s:%d closed the connection" % (host, port))
            buf += chunk
        n, ftype, flags = int.from_bytes(buf[:3], "big"), buf[3], buf[4]
        stream = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
        payload, buf = buf[9:9 + n], buf[9 + n:]
        if ftype == 4 and not flags & 0x1:
            sock.sendall(frame(4, 0x1, 0))  # SETTINGS ack
        elif ftype in (3, 7):
            raise ConnectionError("%s:%d reset the call (HTTP/2 frame type %d)" % (host, port, ftype))
        elif ftype == 0 and stream == 1:
            data += payload[1:len(payload) - payload[0]] if flags & 0x8 else payload
        if stream == 1 and ftype in (0, 1) and flags & 0x1:
            break
    if len(data) < 5:
        raise ValueError("%s:%d answered without a HealthCheckResponse" % (host, port))
    message = data[5:5 + int.from_bytes(data[1:5], "big")]
    return message[1] if message[:1] == b"\x08" else 0


def https_get(host, port, path, ca, cert, key, server_name, timeout=10.0):
    """(status, body) of GET `path`: over TLS when `server_name` is given (checking the server's certificate
    for that name against `ca`, presenting `cert` if given), else plain HTTP; (None, why) when no HTTP answer
    comes. Runs in a pod's network namespace as a script of its own, so it imports what it needs itself."""
    import http.client
    import socket
    import ssl
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
        if server_name is not None:
            ctx = ssl.create_default_context(cafile=ca)
            if cert:
                ctx.load_cert_chain(cert, key)
            sock = ctx.wrap_socket(sock, server_hostname=server_name)
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.sock = sock
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as e:
        return None, "%s: %s" % (type(e).__name__, e)


def make_secrets(work, weft):
    """{Secret name: {key: file}}: the certificates deploy/README.md makes, with `weft certs` of `weft`."""
    script = os.path.join(ROOT, "deploy", "k8s", "make-tls-secrets.sh")
    r = subprocess.run([script, os.path.join(work, "tls")], capture_output=True, text=True,
                       env=dict(os.environ, WEFT=weft))
    if r.returncode != 0:
        raise RuntimeError("make-tls-secrets.sh (weft certs) failed with status %d:\n%s" % (r.returncode, r.stderr))
    secrets = {}
    for line in r.stdout.splitlines():
        words = shlex.split(line)
        name = words[words.index("generic") + 1]
        secrets[name] = dict(w[len("--from-file="):].split("=", 1) for w in words if w.startswith("--from-file="))
    return secrets


class Pod:
    """One pod: a network namespace, an address, and its containers' command lines."""

    def __init__(self, name, index, obj, ordinal, work):
        self.name, self.obj, self.ordinal = name, obj, ordinal
        self.ns = "%s-%d" % (TAG, index)
        self.ip = "%s.%d" % (SUBNET, 10 + index)
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir, exist_ok=True)
        self.proc = None
        self.log_path = os.path.join(self.dir, "log.txt")
        # A pod past the StatefulSet's replicas, started only when the test scales it up.
        self.standby = False


class Cluster:
    def __init__(self, work, objects, secrets, weft):
        self.work, self.objects, self.secrets, self.weft = work, objects, secrets, weft
        self.data_root = os.path.join(work, "datasets")  # the image's /usr/share/datasets
        self.hub = TAG + "-hub"
        self.pods = []
        self.namespaces = []
        self.hosts = os.path.join(work, "hosts")
        self.shared = os.path.join(work, "shared")  # the ReadWriteMany claim
        self.bin = os.path.join(work, "bin")  # the image's /usr/local/bin
        os.makedirs(self.bin)
        os.symlink(weft, os.path.join(self.bin, "weft"))

    def get(self, kind, name):
        return next(o for o in self.objects if o["kind"] == kind and o["metadata"]["name"] == name)

    def network(self):
        run("ip", "netns", "add", self.hub)
        self.namespaces.append(self.hub)
        run("ip", "-n", self.hub, "link", "add", "name", "br0", "type", "bridge")
        run("ip", "-n", self.hub, "link", "set", "br0", "up")
        lines = ["127.0.0.1 localhost"]
        for i, pod in enumerate(self.pods):
            run("ip", "netns", "add", pod.ns)
            self.namespaces.append(pod.ns)
            run("ip", "-n", self.hub, "link", "add", "name", "h%d" % i, "type", "veth", "peer", "name", "eth0",
                "netns", pod.ns)
            run("ip", "-n", self.hub, "link", "set", "h%d" % i, "master", "br0", "up")
            run("ip", "-n", pod.ns, "addr", "add", pod.ip + "/24", "dev", "eth0")
            run("ip", "-n", pod.ns, "link", "set", "eth0", "up")
            run("ip", "-n", pod.ns, "link", "set", "lo", "up")
            svc = pod.obj["spec"].get("serviceName")
            names = [pod.name] + (["%s.%s" % (pod.name, svc)] if svc else [])
            lines.append("%s %s" % (pod.ip, " ".join(names)))
        with open(self.hosts, "w") as f:
            f.write("\n".join(lines) + "\n")

    def volume_dirs(self, pod):
        """{mountPath: directory} for a pod's volumes, as the kubelet would mount them."""
        spec = pod.obj["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        out = {}
        for c in (spec.get("initContainers") or []) + spec["containers"]:
            for m in c.get("volumeMounts") or []:
                v = volumes.get(m["name"])
                if v is None:  # a volumeClaimTemplate: the pod's own claim
                    d = os.path.join(pod.dir, "claim-" + m["name"])
                elif "persistentVolumeClaim" in v:
                    d = os.path.join(self.shared, v["persistentVolumeClaim"]["claimName"])
                elif "configMap" in v:
                    d = os.path.join(pod.dir, "configmap-" + m["name"])
                    os.makedirs(d, exist_ok=True)
                    cm = self.get("ConfigMap", v["configMap"]["name"])
                    items = v["configMap"].get("items") or [{"key": k, "path": k} for k in cm["data"]]
                    for item in items:
                        if os.path.exists(os.path.join(d, item["path"])):
                            continue  # written once, as the kubelet projects it
                        with open(os.path.join(d, item["path"]), "w") as f:
                            f.write(cm["data"][item["key"]])
                elif "secret" in v:
                    name = v["secret"]["secretName"]
                    if name not in self.secrets:
                        raise RuntimeError("%s: volume %s: make-tls-secrets.sh makes no Secret %s"
                                           % (pod.name, v["name"], name))
                    d = os.path.join(pod.dir, "secret-" + m["name"])
                    os.makedirs(d, exist_ok=True)
                    keys = self.secrets[name]
                    items = v["secret"].get("items") or [{"key": k, "path": k} for k in keys]
                    for item in items:
                        dst = os.path.join(d, item["path"])
                        if not os.path.exists(dst):
                            shutil.copyfile(keys[item["key"]], dst)
                            os.chmod(dst, item.get("mode", v["secret"].get("defaultMode", 0o644)))
                else:
                    d = os.path.join(pod.dir, "volume-" + m["name"])
                os.makedirs(d, exist_ok=True)
                out[m["mountPath"]] = d
        return out

    def command_line(self, pod, container):
        """argv and env of a container, with what Kubernetes substitutes."""
        env = {}
        for e in container.get("env") or []:
            vf = e.get("valueFrom")
            if vf is None:
                env[e["name"]] = e.get("value", "")
            elif "configMapKeyRef" in vf:
                ref = vf["configMapKeyRef"]
                env[e["name"]] = self.get("ConfigMap", ref["name"])["data"][ref["key"]]
            elif vf.get("fieldRef", {}).get("fieldPath") == "metadata.name":
                env[e["name"]] = pod.name
            elif vf.get("fieldRef", {}).get("fieldPath") == "metadata.labels['apps.kubernetes.io/pod-index']":
                env[e["name"]] = str(pod.ordinal)
            else:
                raise RuntimeError("%s: env %s: a source this test cannot supply" % (pod.name, e["name"]))
        argv = [VAR_REF.sub(lambda m: env.get(m.group(1), m.group(0)), a)
                for a in (container.get("command") or []) + (container.get("args") or [])]
        mounts = self.volume_dirs(pod)
        # One pass, longest path first: a directory put in for one mount
        # (under /tmp) must not be rewritten again for another (/tmp).
        paths = dict(mounts, **{DATA_ROOT: self.data_root})
        pattern = re.compile(r"(?<![\w/])(%s)(?=/|$)" % "|".join(
            re.escape(p) for p in sorted(paths, key=len, reverse=True)))
        argv = [pattern.sub(lambda m: paths[m.group(1)], a) for a in argv]
        env = {k: pattern.sub(lambda m: paths[m.group(1)], v) for k, v in env.items()}
        return argv, env, mounts

    def wrap(self, pod, argv, env):
        """The command that runs argv as the pod would, and its environment."""
        full_env = {"PATH": self.bin + ":/usr/sbin:/usr/bin:/sbin:/bin", "HOME": pod.dir, "HOSTNAME": pod.name}
        full_env.update(env)
        # ip netns exec: the pod's network; unshare: its own mount and UTS
        # namespaces, for /etc/hosts and the host name.
        wrapper = ["ip", "netns", "exec", pod.ns, "unshare", "--mount", "--uts", "--propagation", "private", "sh",
                   "-c", 'mount --bind "$0" /etc/hosts && hostname "$1" && shift && exec "$@"', self.hosts,
                   pod.name] + argv
        return wrapper, full_env

    def start(self, pod, container):
        argv, env, _ = self.command_line(pod, container)
        wrapper, full_env = self.wrap(pod, argv, env)
        out = open(pod.log_path, "a")
        out.write("$ %s\n" % " ".join(argv))
        out.flush()
        return subprocess.Popen(wrapper, env=full_env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def start_daemon(self, pod):
        pod.proc = self.start(pod, pod.obj["spec"]["template"]["spec"]["containers"][0])

    def teardown(self):
        for pod in self.pods:
            if pod.proc and pod.proc.poll() is None:
                os.killpg(pod.proc.pid, signal.SIGKILL)
                pod.proc.wait()
        for ns in reversed(self.namespaces):
            run("ip", "netns", "del", ns, check=False)


def check_probes_and_refusals(cluster, client, spec):
    """From the client pod: plaintext health checks as the kubelet probes, and the master refusing strangers."""
    source = inspect.getsource(grpc_health_status)
    for pod in cluster.pods:
        if pod is client:
            continue
        c = pod.obj["spec"]["template"]["spec"]["containers"][0]
        for port, serving in ((c["readinessProbe"]["grpc"]["port"], True),
                              (next(p["containerPort"] for p in c["ports"] if p["name"] == "grpc"), False)):
            r = subprocess.run(["ip", "netns", "exec", client.ns, "/usr/bin/python3", "-c",
                                source + "\nprint(grpc_health_status(%r, %d))" % (pod.ip, port)],
                               capture_output=True, text=True, timeout=30)
            answered = r.returncode == 0 and r.stdout.strip() == "1"
            assert answered == serving, "%s port %d: a plaintext health check %s (%s)" % (
                pod.name, port, "was not answered SERVING" if serving else "was answered: the port is not mTLS-only",
                (r.stdout + r.stderr).strip()[-500:])
            log("%s port %d: plaintext health check %s" % (pod.name, port, "SERVING" if serving else "refused"))
    # Clients the master must refuse: a certificate another CA signed, a
    # token it does not know, no TLS at all.
    foreign = os.path.join(cluster.work, "foreign-ca")
    run(cluster.weft, "certs", "init", foreign)
    run(cluster.weft, "certs", "issue", foreign, "--name=mallory", "--role=user")
    token = os.path.join(client.dir, "token")
    with open(os.open(token, os.O_CREAT | os.O_WRONLY, 0o600), "w") as f:
        f.write("not-a-token-the-master-knows\n")
    # Mallory trusts both CAs, so that her client verifies the master and
    # presents her certificate: the master's check is the one that refuses.
    bundle = os.path.join(client.dir, "both-cas.crt")
    with open(bundle, "w") as out:
        for ca in (os.path.join(foreign, "ca.crt"), cluster.secrets["weft-tls-client"]["ca.crt"]):
            with open(ca) as f:
                out.write(f.read())
    env = [e for e in spec["containers"][0]["env"] if e["name"] in ("WEFT_MASTER", "WEFT_CA")]
    for what, extra, args in (
            ("a certificate from another CA", [{"name": "WEFT_CA", "value": bundle},
                                               {"name": "WEFT_CERT", "value": os.path.join(foreign, "mallory.crt")},
                                               {"name": "WEFT_KEY", "value": os.path.join(foreign, "mallory.key")}],
             []),
            ("an unknown token", [{"name": "WEFT_TOKEN_FILE", "value": token}], []),
            ("a plaintext client", None, ["--insecure"])):
        client_env = env + extra if extra is not None else env[:1]  # a later WEFT_CA wins
        argv, full = cluster.command_line(client, {"command": ["weft"], "args": ["jobs"] + args,
                                                   "env": client_env})[:2]
        wrapper, full_env = cluster.wrap(client, argv, full)
        try:
            r = subprocess.run(wrapper, capture_output=True, text=True, env=full_env, timeout=30)
        except subprocess.TimeoutExpired:
            log("the master did not answer %s in 30 s" % what)
            continue
        assert r.returncode != 0, "the master answered %s: %s" % (what, r.stdout)
        log("the master refused %s: %s" % (what, r.stderr.strip()[-200:]))


def check_metrics(cluster, client):
    """From the client pod: every daemon's metrics port as the ServiceMonitor scrapes it, and as others may not."""
    monitor = next(o for o in render.render(os.path.join(ROOT, "deploy", "k8s", "monitoring"))
                   if o["kind"] == "ServiceMonitor")
    endpoint = monitor["spec"]["endpoints"][0]
    tls = endpoint["tlsConfig"]
    prometheus = cluster.secrets[tls["cert"]["secret"]["name"]]
    ca = prometheus[tls["ca"]["secret"]["key"]]
    as_prometheus = (ca, prometheus[tls["cert"]["secret"]["key"]], prometheus[tls["keySecret"]["key"]])
    user = cluster.secrets["weft-tls-client"]
    as_user = (ca, user["client.crt"], user["client.key"])
    source = inspect.getsource(https_get)
    for pod in cluster.pods:
        if pod is client:
            continue
        c = pod.obj["spec"]["template"]["spec"]["containers"][0]
        port = next(p["containerPort"] for p in c["ports"] if p["name"] == endpoint["port"])
        checks = [("Prometheus' certificate", endpoint["path"], as_prometheus, tls["serverName"], 200),
                  ("a user's certificate", endpoint["path"], as_user, tls["serverName"], 403),
                  ("no certificate", endpoint["path"], (ca, None, None), tls["serverName"], None),
                  ("plain HTTP", endpoint["path"], (None, None, None), None, None)]
        if pod.obj["metadata"]["name"] == "weft-master":
            checks.append(("the dashboard, as Prometheus", "/", as_prometheus, tls["serverName"], 200))
        for what, path, (ca_file, cert, key), server, want in checks:
            r = subprocess.run(["ip", "netns", "exec", client.ns, "/usr/bin/python3", "-c", source
                                + "\nimport json\nprint(json.dumps(https_get(%r, %d, %r, %r, %r, %r, %r)))"
                                % (pod.ip, port, path, ca_file, cert, key, server)],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, "%s: %s" % (pod.name, r.stderr[-500:])
            status, body = json.loads(r.stdout)
            ok = status == want if want is not None else status != 200  # plain HTTP: no page, whatever else
            assert ok, "%s port %d%s with %s: got %s, want %s: %s" % (
                pod.name, port, path, what, status, want or "no 200", body[-300:])
            if what == "Prometheus' certificate":
                assert re.search(r"^# TYPE weft_\w+ ", body, re.M), "%s /metrics: no weft_ metric: %s" % (
                    pod.name, body[:300])
            log("%s port %d%s with %s: %s" % (pod.name, port, path, what, status))


def weft_binary():
    if os.environ.get("WEFT"):
        return os.path.abspath(os.environ["WEFT"])
    for path in (os.path.join(ROOT, "client", "weft"), os.path.join(ROOT, "bazel-bin", "client", "weft")):
        if os.path.isfile(path):
            return path
    raise RuntimeError("no weft binary: set WEFT, or `bazel build //client:weft`")


def why_no_namespaces():
    """Why network namespaces cannot be made here; None if they can."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    for tool in ("ip", "unshare", "mount"):
        if shutil.which(tool) is None:
            return "no `%s` (Debian's iproute2/util-linux)" % tool
    probe = TAG + "-probe"
    r = run("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        return "cannot create a network namespace: " + r.stderr.strip()
    r = run("ip", "-n", probe, "link", "add", "name", "probe0", "type", "bridge", check=False)
    run("ip", "netns", "del", probe, check=False)
    if r.returncode != 0:
        return "cannot create links in a network namespace (CAP_NET_ADMIN?): " + r.stderr.strip()
    return None


class Alarm(Exception):
    pass


def on_alarm(signum, frame):
    raise Alarm("the test ran past %d s" % ALARM_S)


class MultihostTest(unittest.TestCase):
    def setUp(self):
        reason = why_no_namespaces()
        if reason:
            log("SKIPPED: " + reason)
            self.skipTest(reason)
        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(ALARM_S)
        self.addCleanup(signal.signal, signal.SIGALRM, previous)
        self.addCleanup(signal.alarm, 0)

    def test_job_survives_a_lost_worker_and_strangers_are_refused(self):
        run_cluster(weft_binary())


def check_mirrored_over_the_network(cluster, submit, spec, mounts, data):
    """A MULTI_WORKER_MIRRORED job across the worker pods: each pod is a host of its own (its own network
    namespace), so the workers' collectives refuse shared memory and take their TLS sockets, and the job succeeds."""
    job_path = os.path.join(mounts["/etc/weft"], "mirrored.pbtxt")
    with open(job_path, "w") as f:
        f.write('name: "multihost-mirrored" model { input_shape: [12] num_classes: 3 '
                'layer { dense { units: 16 activation: RELU } } layer { dense { units: 3 } } } '
                'dataset { dir: "%s" } optimizer { sgd { learning_rate: 0.1 } } seed: 2 intra_op_threads: 1 '
                'batch_size: 16 steps: 100 strategy { kind: MULTI_WORKER_MIRRORED }\n' % data)
    argv, env, _ = cluster.command_line(submit, {"command": ["weft"], "args": [
        "submit", "/etc/weft/mirrored.pbtxt", "--follow"], "env": spec["containers"][0]["env"]})
    wrapper, full_env = cluster.wrap(submit, argv, env)
    done = subprocess.run(wrapper, capture_output=True, text=True, env=full_env, timeout=120)
    assert done.returncode == 0, "the mirrored job failed:\n%s%s" % (done.stdout[-2000:], done.stderr[-2000:])
    for pod in cluster.pods:
        if not pod.name.startswith("weft-worker-") or pod.proc is None:
            continue
        with open(pod.log_path) as f:
            text = f.read()
        assert "go through shared memory" not in text, "%s used shared memory across hosts" % pod.name
        assert "another host" in text, "%s never learnt that its peer is on another host:\n%s" % (
            pod.name, text[-2000:])
        assert "go over a TLS socket" in text, "%s sent its chunks other than over its own TLS socket:\n%s" % (
            pod.name, text[-2000:])
    log("the mirrored job SUCCEEDED with its collectives over TLS sockets between hosts")


def weft_in(cluster, pod, spec, args, timeout=30):
    """`weft ARGS` run in `pod`'s namespace with its container's environment (certificates, master address)."""
    argv, env, _ = cluster.command_line(pod, {"command": ["weft"], "args": args, "env": spec["containers"][0]["env"]})
    wrapper, full_env = cluster.wrap(pod, argv, env)
    return subprocess.run(wrapper, capture_output=True, text=True, env=full_env, timeout=timeout)


def check_elastic_scaling(cluster, submit, spec, mounts, data):
    """An elastic MULTI_WORKER_MIRRORED job across the worker pods (hosts of their own) scaled down to one worker
    and back up to two with `weft scale`, then onto a third worker pod past the cluster string, started as
    `kubectl scale statefulset weft-worker --replicas=3` would start it: it registers with the master at its
    StatefulSet name with its own certificate. Each change lands at a step boundary, over the TLS sockets, with
    no recovery; the job is cancelled once all three are recorded."""
    with open(os.path.join(mounts["/etc/weft"], "elastic.pbtxt"), "w") as f:
        f.write('name: "multihost-elastic" model { input_shape: [12] num_classes: 3 '
                'layer { dense { units: 16 activation: RELU } } layer { dense { units: 3 } } } '
                'dataset { dir: "%s" } optimizer { sgd { learning_rate: 0.1 } } seed: 2 intra_op_threads: 1 '
                'batch_size: 24 steps: 1000000 strategy { kind: MULTI_WORKER_MIRRORED } '
                'recovery { heartbeat_ms: 200 } elastic { min_workers: 1 max_workers: 3 }\n' % data)
    done = weft_in(cluster, submit, spec, ["submit", "/etc/weft/elastic.pbtxt"])
    assert done.returncode == 0, "weft submit failed:\n%s%s" % (done.stdout, done.stderr)
    m = re.search(r"(job-[0-9a-f]+-[0-9a-f]+)", done.stdout + done.stderr)
    assert m, "no job id from weft submit:\n%s%s" % (done.stdout, done.stderr)
    job = m.group(1)
    deadline = time.monotonic() + 120

    def status_until(what, pred):
        while True:
            r = weft_in(cluster, submit, spec, ["status", job, "--output=json"])
            assert r.returncode == 0, "weft status failed:\n%s%s" % (r.stdout, r.stderr)
            st = json.loads(r.stdout)
            if pred(st):
                return st
            assert st.get("state") in ("PENDING", "RUNNING", "RECOVERING"), "the job ended: %s" % st
            assert time.monotonic() < deadline, "no %s before the deadline: %s" % (what, st)
            time.sleep(0.2)

    try:
        status_until("step on two workers", lambda st: st.get("steps", 0) > 0 and len(st.get("workers", [])) == 2)
        r = weft_in(cluster, submit, spec, ["scale", job, "--workers=1"])
        assert r.returncode == 0, "weft scale --workers=1 failed:\n%s%s" % (r.stdout, r.stderr)
        status_until("one worker", lambda st: len(st.get("workers", [])) == 1)
        r = weft_in(cluster, submit, spec, ["scale", job, "--workers=2"])
        assert r.returncode == 0, "weft scale --workers=2 failed:\n%s%s" % (r.stdout, r.stderr)
        status_until("two workers again", lambda st: len(st.get("membership_change", [])) == 2)
        newcomer = next(p for p in cluster.pods if p.standby)
        cluster.start_daemon(newcomer)
        log("%s started at %s, past the cluster string" % (newcomer.name, newcomer.ip))
        r = weft_in(cluster, submit, spec, ["scale", job, "--workers=3"])
        assert r.returncode == 0, "weft scale --workers=3 failed:\n%s%s" % (r.stdout, r.stderr)
        st = status_until("three workers", lambda st: len(st.get("membership_change", [])) == 3)
        changes = st["membership_change"]
        assert [c["workers"] for c in changes] == [1, 2, 3], changes
        assert changes[0]["left"] == ["/job:worker/task:1"] and changes[1]["joined"] == ["/job:worker/task:1"], changes
        assert changes[2]["joined"] == ["/job:worker/task:%d" % newcomer.ordinal], changes
        assert int(st.get("restarts", 0)) == 0, "a scale is no recovery: %s" % st
        assert st["state"] == "RUNNING", st
        master = next(p for p in cluster.pods if p.name == "weft-master-0")
        with open(master.log_path) as f:
            joined = "task /job:worker/task:%d joined the cluster at %s.weft-worker:2222" % (newcomer.ordinal,
                                                                                          newcomer.name)
            assert joined in f.read(), "the master's log does not say: %s" % joined
        log("the elastic job went from 2 to 1 to 2 to 3 workers across hosts: %s" % changes)
    finally:
        weft_in(cluster, submit, spec, ["cancel", job])


def run_cluster(weft):
    """The cluster of the rendered cpu overlay, run with the binary `weft`; raises on any failure."""
    objects = render.render(os.path.join(ROOT, "deploy", "k8s", "overlays", "cpu"))
    objects += render.render(os.path.join(ROOT, "deploy", "k8s", "submit"))
    work = tempfile.mkdtemp(prefix="weft-multihost-", dir=os.environ.get("TEST_TMPDIR"))
    cluster = Cluster(work, objects, make_secrets(work, weft), weft)
    statefulsets = [o for o in objects if o["kind"] == "StatefulSet"]
    for sts in statefulsets:
        replicas = sts["spec"]["replicas"]
        # The workers one more: the pod a scale-up of the StatefulSet adds.
        for i in range(replicas + (sts["metadata"]["name"] == "weft-worker")):
            cluster.pods.append(Pod("%s-%d" % (sts["metadata"]["name"], i), len(cluster.pods), sts, i, work))
            cluster.pods[-1].standby = i >= replicas
    submit_job = cluster.get("Job", "weft-submit")
    submit = Pod("weft-submit-0", len(cluster.pods), submit_job, 0, work)
    cluster.pods.append(submit)
    ok = False
    try:
        cluster.network()
        log("pods: " + ", ".join("%s %s" % (p.name, p.ip) for p in cluster.pods))
        for pod in cluster.pods[:-1]:
            if not pod.standby:
                cluster.start_daemon(pod)

        # The job: the example's strategy and checkpoint policy, on the
        # shared claim, over a tiny dataset in the image's dataset directory.
        spec = submit_job["spec"]["template"]["spec"]
        _, _, mounts = cluster.command_line(submit, spec["containers"][0])
        ckpt_claim = os.path.join(cluster.shared, "weft-checkpoints")
        data = os.path.join(cluster.data_root, "multihost")
        write_idx_data(data)
        ckpt = os.path.join(ckpt_claim, "multihost-job")
        job_path = os.path.join(mounts["/etc/weft"], "job.pbtxt")
        with open(job_path, "w") as f:
            f.write('name: "multihost" model { input_shape: [12] num_classes: 3 '
                    'layer { dense { units: 16 activation: RELU } } layer { dense { units: 3 } } } '
                    'dataset { dir: "%s" } optimizer { sgd { learning_rate: 0.1 } } seed: 2 intra_op_threads: 1 '
                    'batch_size: 16 steps: 600 strategy { kind: PARAMETER_SERVER sync: true } '
                    'checkpoint { dir: "%s" every_steps: 50 } recovery { task_wait_seconds: 60 }\n' % (data, ckpt))
        deadline = time.monotonic() + DEADLINE_S

        # The submit Job: its init container waits for the master, then weft submit --follow.
        init = cluster.start(submit, spec["initContainers"][0])
        while init.poll() is None:
            dead = [p.name for p in cluster.pods if p.proc and p.proc.poll() is not None]
            assert not dead, "%s exited before the master answered (see their logs below)" % ", ".join(dead)
            assert time.monotonic() < deadline, "the master did not answer `weft jobs` before the deadline"
            time.sleep(0.2)
        assert init.returncode == 0, "the submit Job's init container failed (see %s)" % submit.log_path
        submit.proc = cluster.start(submit, spec["containers"][0])

        # Kill worker 1 once a checkpoint exists, mid-job.
        victim = next(p for p in cluster.pods if p.name == "weft-worker-1")
        while not (os.path.isdir(ckpt) and any(d.startswith("step-") for d in os.listdir(ckpt))):
            assert submit.proc.poll() is None, "weft submit ended before the first checkpoint: see " + submit.log_path
            assert time.monotonic() < deadline, "no checkpoint in %s before the deadline" % ckpt
            time.sleep(0.05)
        log("checkpoint written (%s); SIGKILL %s" % (sorted(os.listdir(ckpt))[-1], victim.name))
        os.killpg(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait()
        cluster.start_daemon(victim)
        log("%s restarted at %s" % (victim.name, victim.ip))

        code = submit.proc.wait(timeout=max(1, deadline - time.monotonic()))
        with open(submit.log_path) as f:
            submit_log = f.read()
        assert code == 0, "weft submit exited %d:\n%s" % (code, submit_log[-3000:])
        m = re.search(r"submitted job (\S+)", submit_log)
        assert m, "no job id in the submit log"
        status_argv, status_env, _ = cluster.command_line(submit, {"command": ["weft"], "args": [
            "status", m.group(1), "--output=json"], "env": spec["containers"][0]["env"]})
        wrapper, full_env = cluster.wrap(submit, status_argv, status_env)
        status = subprocess.run(wrapper, capture_output=True, text=True, env=full_env, timeout=30)
        log("weft status: " + status.stdout.strip())
        st = json.loads(status.stdout)
        assert st.get("state") == "SUCCEEDED", st
        assert int(st.get("restarts", 0)) >= 1, "the job records no recovery: %s" % st
        log("the job SUCCEEDED across the loss of %s" % victim.name)
        check_mirrored_over_the_network(cluster, submit, spec, mounts, data)
        check_elastic_scaling(cluster, submit, spec, mounts, data)
        check_probes_and_refusals(cluster, submit, spec)
        check_metrics(cluster, submit)
        ok = True
        log("PASSED")
    finally:
        cluster.teardown()
        if not ok:
            for pod in cluster.pods:
                if os.path.exists(pod.log_path):
                    with open(pod.log_path) as f:
                        log("--- %s ---\n%s" % (pod.name, f.read()[-2000:]))
    shutil.rmtree(work, ignore_errors=True)
