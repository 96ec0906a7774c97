"""The security rules every weft pod keeps (deploy/README.md, "Security").

Each function takes one pod spec (a StatefulSet's or Job's template, or a
TFJob replica's) and returns messages that say which container or volume
breaks which rule; the caller prefixes the object's name.

  hardening      no service-account token, non-root, seccomp RuntimeDefault,
                 no host namespaces; every container with a read-only root
                 filesystem, no privilege escalation, all capabilities
                 dropped; Secret volumes read-only, mode 0400/0440, readable
                 through fsGroup
  daemon_tls     --ca/--cert/--key in a mounted Secret of the daemon's own
                 role, the certificate of its own task, never --insecure
  client_tls     a client's CA and certificate (or token) in a mounted
                 Secret, from WEFT_* or flags
  health         probes on the plaintext --health_port, not the mTLS port
  secret_keys    the keys each Secret must hold for the manifests' paths
"""
import posixpath
import re

# The certificate file stem of each daemon role; $(POD_INDEX) is the pod's
# ordinal, so a task presents its own task's certificate (its identity is
# the certificate's name).
CERT_STEMS = {"master": "master", "worker": "worker-$(POD_INDEX)", "ps": "ps-$(POD_INDEX)"}
CLIENT_ENV = {"ca": "WEFT_CA", "cert": "WEFT_CERT", "key": "WEFT_KEY", "token_file": "WEFT_TOKEN_FILE"}


def under(path, mount):
    return path == mount or path.startswith(mount.rstrip("/") + "/")


def mode_text(mode):
    return "0%o" % mode if isinstance(mode, int) else repr(mode)


def secret_names(volume):
    """The Secrets a volume projects, or None if it is not Secret-backed."""
    if "secret" in volume:
        return [(volume["secret"] or {}).get("secretName")]
    if "projected" in volume:
        sources = (volume["projected"] or {}).get("sources") or []
        if sources and all("secret" in s for s in sources):
            return [(s["secret"] or {}).get("name") for s in sources]
    return None


def secret_mounts(pod, container):
    """[(mountPath, volume)] of the container's Secret-backed mounts."""
    volumes = {v.get("name"): v for v in pod.get("volumes") or []}
    out = []
    for m in container.get("volumeMounts") or []:
        v = volumes.get(m.get("name"))
        if v is not None and secret_names(v) is not None:
            out.append((m.get("mountPath", ""), v))
    return out


def file_in_secret(pod, container, path):
    """(volume, key) holding `path`, deepest mount first; None if no Secret has it."""
    for mount, v in sorted(secret_mounts(pod, container), key=lambda mv: -len(mv[0])):
        if under(path, mount):
            return v, path[len(mount.rstrip("/")) + 1:]
    return None


def hardening(pod):
    errors = []
    if pod.get("automountServiceAccountToken") is not False:
        errors.append("automountServiceAccountToken must be false: weft calls no Kubernetes API, and a mounted "
                      "token is a credential for whoever breaks into the pod")
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(host):
            errors.append("%s must not be set: a weft pod shares nothing with its node" % host)
    sc = pod.get("securityContext") or {}
    if not sc.get("runAsNonRoot"):
        errors.append("pod securityContext.runAsNonRoot must be true")
    if sc.get("runAsUser") == 0:
        errors.append("pod securityContext.runAsUser is 0 (root); the image's user is 10001")
    seccomp = (sc.get("seccompProfile") or {}).get("type")
    if seccomp != "RuntimeDefault":
        errors.append("pod securityContext.seccompProfile.type must be RuntimeDefault, got %s" % seccomp)
    for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
        errors += container_hardening(c)
    errors += secret_volume_rules(pod)
    return errors


def container_hardening(c):
    errors = []
    name = c.get("name")
    sc = c.get("securityContext") or {}
    if sc.get("readOnlyRootFilesystem") is not True:
        errors.append("container %s: securityContext.readOnlyRootFilesystem must be true (weft writes only to its "
                      "volumes; mount an emptyDir where a library needs scratch space)" % name)
    if sc.get("allowPrivilegeEscalation") is not False:
        errors.append("container %s: securityContext.allowPrivilegeEscalation must be false" % name)
    if sc.get("privileged"):
        errors.append("container %s: securityContext.privileged must not be set" % name)
    caps = sc.get("capabilities") or {}
    if "ALL" not in (caps.get("drop") or []):
        errors.append("container %s: securityContext.capabilities.drop must include ALL (weft needs no "
                      "capability)" % name)
    if caps.get("add"):
        errors.append("container %s: securityContext.capabilities.add %s: weft needs no capability"
                      % (name, caps["add"]))
    if sc.get("runAsNonRoot") is False or sc.get("runAsUser") == 0:
        errors.append("container %s: securityContext runs as root, overriding the pod's runAsNonRoot" % name)
    seccomp = (sc.get("seccompProfile") or {}).get("type")
    if seccomp is not None and seccomp != "RuntimeDefault":
        errors.append("container %s: securityContext.seccompProfile.type %s overrides the pod's RuntimeDefault"
                      % (name, seccomp))
    return errors


def secret_volume_rules(pod):
    errors = []
    sc = pod.get("securityContext") or {}
    secret_volumes = [v for v in pod.get("volumes") or [] if secret_names(v) is not None]
    for v in secret_volumes:
        body = v.get("secret") or v.get("projected") or {}
        mode = body.get("defaultMode", 0o644)
        modes = [("defaultMode", mode)] + [("items[%s].mode" % i.get("key"), i["mode"])
                                           for i in body.get("items") or [] if "mode" in i]
        for what, m in modes:
            if not isinstance(m, int) or m & 0o337:
                errors.append("volume %s: %s %s lets the key be written, executed or read by any user; use 0440 "
                              "(or 0400)" % (v["name"], what, mode_text(m)))
        if sc.get("runAsUser", 1) != 0 and "fsGroup" not in sc:
            errors.append("volume %s: Secret files belong to root, so a non-root user reads them only through "
                          "securityContext.fsGroup, which is not set" % v["name"])
    names = {v["name"] for v in secret_volumes}
    for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
        for m in c.get("volumeMounts") or []:
            if m.get("name") in names and m.get("readOnly") is not True:
                errors.append("container %s: volumeMount %s (a Secret) must be readOnly: true"
                              % (c.get("name"), m.get("name")))
    return errors


def check_secret_of_role(pod, container, path, flag, allowed):
    """Errors unless `path` is in a mounted Secret among `allowed` names (None: any)."""
    found = file_in_secret(pod, container, path)
    if found is None:
        return ["container %s: %s=%s is not in a mounted Secret (the manifests mount them at /etc/weft/tls)"
                % (container.get("name"), flag, path)]
    volume, _ = found
    # <name>-<n>: one task's Secret, as cert-manager makes them (deploy/README.md).
    wrong = [s for s in secret_names(volume) if allowed is not None and s not in allowed
             and not any(re.fullmatch(re.escape(a) + r"-\d+", str(s)) for a in allowed)]
    if wrong:
        return ["container %s: %s=%s comes from Secret %s; this pod may mount only %s, so that it holds no "
                "other role's key" % (container.get("name"), flag, path, ", ".join(map(str, wrong)),
                                      " or ".join(sorted(allowed)))]
    return []


def daemon_tls(pod, container, role, flags, secret_prefix):
    """A daemon's own credentials: --ca, --cert, --key in its role's Secret."""
    name = container.get("name")
    errors = []
    if "insecure" in flags:
        errors.append("container %s: --insecure turns off TLS and authentication; the manifests never ship it "
                      "(deploy/README.md, \"Security\")" % name)
    missing = [f for f in ("ca", "cert", "key") if not flags.get(f)]
    if missing:
        errors.append("container %s: `weft %s` has no %s: a daemon without its CA, certificate and key refuses "
                      "to start" % (name, role, ", ".join("--" + f for f in missing)))
    stem = CERT_STEMS[role]
    for flag, ext in (("cert", ".crt"), ("key", ".key")):
        path = flags.get(flag)
        if path and posixpath.basename(path) != stem + ext:
            errors.append("container %s: --%s=%s is not this %s's own %s%s (a daemon's identity is its "
                          "certificate's name)" % (name, flag, path, role, stem, ext))
    for flag in ("ca", "cert", "key"):
        if flags.get(flag):
            errors += check_secret_of_role(pod, container, flags[flag], "--" + flag, {"%s-%s" % (secret_prefix, role)})
    if flags.get("auth_tokens_file"):  # the users' bearer tokens: a Secret of their own
        errors += check_secret_of_role(pod, container, flags["auth_tokens_file"], "--auth_tokens_file", None)
    return errors


def client_tls(pod, container, env, flags, secret_prefix):
    """A client's credentials, from flags or WEFT_* env: the CA and a user certificate or token."""
    name = container.get("name")
    errors = []
    if "insecure" in flags:
        errors.append("container %s: --insecure: the master serves only TLS" % name)
    value = {k: flags.get(k) or env.get(e) for k, e in CLIENT_ENV.items()}
    if not value["ca"]:
        errors.append("container %s: no WEFT_CA (or --ca): the client cannot verify the master" % name)
    if not (value["cert"] and value["key"]) and not value["token_file"]:
        errors.append("container %s: no client certificate (WEFT_CERT and WEFT_KEY) or token (WEFT_TOKEN_FILE): "
                      "the master refuses anonymous calls" % name)
    allowed = {"%s-client" % secret_prefix}
    for k, path in value.items():
        if path:
            errors += check_secret_of_role(pod, container, path, "--%s/%s" % (k, CLIENT_ENV[k]), allowed)
    return errors


def health(container, flags, main_port, probes=("readinessProbe", "livenessProbe")):
    """Probes go to the plaintext --health_port; the daemon's port is mTLS-only."""
    name = container.get("name")
    errors = []
    hp = flags.get("health_port", "")
    if not hp.isdigit() or int(hp) == 0:
        return ["container %s: no --health_port: the kubelet's gRPC probes speak plaintext and cannot reach the "
                "mTLS port; serve the health service on its own port" % name]
    hp = int(hp)
    if hp == main_port:
        errors.append("container %s: --health_port=%d is the daemon's own port" % (name, hp))
    ports = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
    if ports.get("health") != hp:
        errors.append("container %s: no port named health at %d (--health_port)" % (name, hp))
    for probe_name in probes:
        probe = container.get(probe_name)
        if not probe:
            errors.append("container %s: no %s" % (name, probe_name))
            continue
        grpc = probe.get("grpc")
        if not grpc:
            errors.append("container %s: %s must be a gRPC health probe (grpc: {port: ...})" % (name, probe_name))
        elif grpc.get("port") != hp:
            errors.append("container %s: %s probes port %s, but the plaintext health service is on %d "
                          "(--health_port); the daemon's port %s is mTLS-only" % (name, probe_name, grpc.get("port"),
                                                                                  hp, main_port))
    return errors


def secret_keys(pod, container, paths, replicas):
    """{secret: {key}} that `paths` need, $(POD_INDEX) taken over 0..replicas-1."""
    out = {}
    for path in paths:
        found = file_in_secret(pod, container, path)
        if found is None:
            continue
        volume, key = found
        names = secret_names(volume)
        if "secret" in volume and (volume["secret"] or {}).get("items"):
            key = next((i.get("key") for i in volume["secret"]["items"] if i.get("path") == key), key)
        keys = {re.sub(r"\$\(POD_INDEX\)", str(i), key) for i in range(replicas)} if "$(POD_INDEX)" in key else {key}
        for n in names[:1]:
            out.setdefault(n, set()).update(keys)
    return out
