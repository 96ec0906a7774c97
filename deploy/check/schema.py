"""Structural validation of Kubernetes objects against the API schema.

The schema is the Kubernetes API's own, as Debian's python3-kubernetes
generates it into model classes (kubernetes.client.models: every field's
JSON name and type, and which fields are required), plus SUPPLEMENT: the
fields newer than that package's API version that weft's manifests use.
Unknown fields are errors (a misspelt `livenessProbes` would otherwise be
silently dropped by the API server), as are wrong types and missing
required fields.

TFJob (kubeflow.org/v1) is a custom resource: its envelope is checked
against TFJOB_SCHEMA, written from Kubeflow's CRD, and each replica's pod
template against the core schema. ServiceMonitor (monitoring.coreos.com/v1,
the Prometheus Operator's) likewise against SERVICEMONITOR_SCHEMA, written
from the operator's CRD (v0.7x): every field of the kinds it nests.
"""
import functools

import kubernetes.client as k8s

# Probe.grpc (GRPCAction), beta in Kubernetes 1.24 and GA in 1.27: newer than
# Debian 12's python3-kubernetes (API 1.22).
SUPPLEMENT = {
    "V1Probe": {"grpc": ("grpc", "V1GRPCAction")},
}
SUPPLEMENT_MODELS = {
    # name -> ({json field: type}, required fields)
    "V1GRPCAction": ({"port": "int", "service": "str"}, {"port"}),
}

# Kubeflow training-operator v1 TFJob, the fields of its CRD (v1.7).
TFJOB_SCHEMA = {
    "TFJob": ({"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta", "spec": "TFJobSpec"},
              {"apiVersion", "kind", "spec"}),
    "TFJobSpec": ({"runPolicy": "KubeflowRunPolicy", "successPolicy": "str", "enableDynamicWorker": "bool",
                   "tfReplicaSpecs": "dict(str, KubeflowReplicaSpec)"}, {"tfReplicaSpecs"}),
    "KubeflowRunPolicy": ({"cleanPodPolicy": "str", "ttlSecondsAfterFinished": "int",
                           "activeDeadlineSeconds": "int", "backoffLimit": "int", "suspend": "bool",
                           "schedulingPolicy": "KubeflowSchedulingPolicy"}, set()),
    "KubeflowSchedulingPolicy": ({"minAvailable": "int", "queue": "str", "minResources": "dict(str, str)",
                                  "priorityClass": "str", "scheduleTimeoutSeconds": "int"}, set()),
    "KubeflowReplicaSpec": ({"replicas": "int", "template": "V1PodTemplateSpec", "restartPolicy": "str"},
                            set()),
}
# Prometheus Operator ServiceMonitor, the fields of its CRD (v0.7x).
SERVICEMONITOR_SCHEMA = {
    "ServiceMonitor": ({"apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
                        "spec": "ServiceMonitorSpec"}, {"apiVersion", "kind", "spec"}),
    "ServiceMonitorSpec": ({"jobLabel": "str", "targetLabels": "list[str]", "podTargetLabels": "list[str]",
                            "endpoints": "list[ServiceMonitorEndpoint]", "selector": "V1LabelSelector",
                            "namespaceSelector": "ServiceMonitorNamespaceSelector", "sampleLimit": "int",
                            "targetLimit": "int", "labelLimit": "int", "labelNameLengthLimit": "int",
                            "labelValueLengthLimit": "int", "keepDroppedTargets": "int",
                            "scrapeProtocols": "list[str]", "scrapeClass": "str", "bodySizeLimit": "str",
                            "attachMetadata": "ServiceMonitorAttachMetadata"}, {"selector"}),
    "ServiceMonitorNamespaceSelector": ({"any": "bool", "matchNames": "list[str]"}, set()),
    "ServiceMonitorAttachMetadata": ({"node": "bool"}, set()),
    "ServiceMonitorEndpoint": ({"port": "str", "targetPort": "object", "path": "str", "scheme": "str",
                                "params": "dict(str, list[str])", "interval": "str", "scrapeTimeout": "str",
                                "tlsConfig": "ServiceMonitorTLSConfig", "bearerTokenFile": "str",
                                "bearerTokenSecret": "V1SecretKeySelector",
                                "authorization": "ServiceMonitorAuthorization", "basicAuth": "ServiceMonitorBasicAuth",
                                "oauth2": "object", "honorLabels": "bool", "honorTimestamps": "bool",
                                "trackTimestampsStaleness": "bool", "metricRelabelings": "list[ServiceMonitorRelabel]",
                                "relabelings": "list[ServiceMonitorRelabel]", "proxyUrl": "str",
                                "followRedirects": "bool", "enableHttp2": "bool", "filterRunning": "bool"}, set()),
    "ServiceMonitorTLSConfig": ({"ca": "ServiceMonitorSecretOrConfigMap", "cert": "ServiceMonitorSecretOrConfigMap",
                                 "keySecret": "V1SecretKeySelector", "serverName": "str", "insecureSkipVerify": "bool",
                                 "caFile": "str", "certFile": "str", "keyFile": "str", "minVersion": "str",
                                 "maxVersion": "str"}, set()),
    "ServiceMonitorSecretOrConfigMap": ({"secret": "V1SecretKeySelector", "configMap": "V1ConfigMapKeySelector"},
                                        set()),
    "ServiceMonitorAuthorization": ({"type": "str", "credentials": "V1SecretKeySelector"}, set()),
    "ServiceMonitorBasicAuth": ({"username": "V1SecretKeySelector", "password": "V1SecretKeySelector"}, set()),
    "ServiceMonitorRelabel": ({"sourceLabels": "list[str]", "separator": "str", "targetLabel": "str", "regex": "str",
                               "modulus": "int", "replacement": "str", "action": "str"}, set()),
}
# The custom resources: (apiVersion, kind) -> the table of their types.
CRD_SCHEMAS = {("kubeflow.org/v1", "TFJob"): TFJOB_SCHEMA,
               ("monitoring.coreos.com/v1", "ServiceMonitor"): SERVICEMONITOR_SCHEMA}
CRD_TYPES = dict(kv for table in CRD_SCHEMAS.values() for kv in table.items())
SERVICEMONITOR_SCHEMES = {"http", "https"}
TFJOB_REPLICA_TYPES = {"Chief", "Master", "PS", "Worker", "Evaluator"}
TFJOB_RESTART_POLICIES = {"Always", "OnFailure", "Never", "ExitCode"}


def fields_of(type_name):
    """{json name: (python name or None, type)} and the required json names."""
    if type_name in CRD_TYPES:
        fields, required = CRD_TYPES[type_name]
        return {k: (None, t) for k, t in fields.items()}, required
    if type_name in SUPPLEMENT_MODELS:
        fields, required = SUPPLEMENT_MODELS[type_name]
        return {k: (None, t) for k, t in fields.items()}, required
    cls = getattr(k8s, type_name, None)
    if cls is None:
        raise KeyError(type_name)
    out = {cls.attribute_map[py]: (py, t) for py, t in cls.openapi_types.items()}
    for json_name, (py, t) in SUPPLEMENT.get(type_name, {}).items():
        out[json_name] = (None, t)
    return out, required_of(type_name)


@functools.lru_cache(maxsize=None)
def required_of(type_name):
    """The required json names of a generated model: those whose setter refuses None."""
    cls = getattr(k8s, type_name)
    unchecked = k8s.Configuration()
    unchecked.client_side_validation = False
    model = cls(local_vars_configuration=unchecked)
    model.local_vars_configuration = k8s.Configuration()  # validates
    required = set()
    for py in cls.openapi_types:
        try:
            setattr(model, py, None)
        except ValueError:
            required.add(cls.attribute_map[py])
    return frozenset(required)


def model_for(obj):
    api, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    if (api, kind) in CRD_SCHEMAS:
        return kind
    version = api.split("/")[-1]
    name = version[:1].upper() + version[1:] + kind
    if getattr(k8s, name, None) is None:
        return None
    return name


def validate(obj):
    """Errors as 'Kind/name: path: message' strings; empty when the object is valid."""
    name = "%s/%s" % (obj.get("kind"), (obj.get("metadata") or {}).get("name"))
    model = model_for(obj)
    if model is None:
        return ["%s: no schema for apiVersion %s, kind %s" % (name, obj.get("apiVersion"), obj.get("kind"))]
    errors = []
    check(obj, model, "", errors)
    if model == "TFJob":
        specs = (obj.get("spec") or {}).get("tfReplicaSpecs") or {}
        for rtype, spec in specs.items():
            where = "spec.tfReplicaSpecs.%s" % rtype
            if rtype not in TFJOB_REPLICA_TYPES:
                errors.append("%s: replica type must be one of %s" % (where, sorted(TFJOB_REPLICA_TYPES)))
            if isinstance(spec, dict) and spec.get("restartPolicy", "Never") not in TFJOB_RESTART_POLICIES:
                errors.append("%s.restartPolicy: must be one of %s" % (where, sorted(TFJOB_RESTART_POLICIES)))
    if model == "ServiceMonitor":
        for i, ep in enumerate((obj.get("spec") or {}).get("endpoints") or []):
            if isinstance(ep, dict) and ep.get("scheme", "http") not in SERVICEMONITOR_SCHEMES:
                errors.append("spec.endpoints[%d].scheme: must be one of %s (the CRD's enum)"
                              % (i, sorted(SERVICEMONITOR_SCHEMES)))
    return ["%s: %s" % (name, e) for e in errors]


def member(path, key):
    """The path of field `key` of the value at `path` ("" at the object itself)."""
    return "%s.%s" % (path, key) if path else str(key)


def check(value, type_name, path, errors):
    if value is None:
        return
    if type_name.startswith("list["):
        if not isinstance(value, list):
            errors.append("%s: expected a list, got %s" % (path, type(value).__name__))
            return
        for i, v in enumerate(value):
            check(v, type_name[5:-1], "%s[%d]" % (path, i), errors)
        return
    if type_name.startswith("dict("):
        if not isinstance(value, dict):
            errors.append("%s: expected a map, got %s" % (path, type(value).__name__))
            return
        inner = type_name[5:-1].split(", ", 1)[1]
        for k, v in value.items():
            check(v, inner, member(path, k), errors)
        return
    scalar = {"str": str, "int": int, "bool": bool, "float": (int, float), "datetime": str, "date": str}
    if type_name in scalar:
        ok = isinstance(value, scalar[type_name]) and not (type_name == "int" and isinstance(value, bool))
        if not ok:
            errors.append("%s: expected %s, got %s %r" % (path, type_name, type(value).__name__, value))
        return
    if type_name == "object":  # int-or-string, or free-form
        return
    try:
        fields, required = fields_of(type_name)
    except KeyError:
        errors.append("%s: schema has no type %s" % (path, type_name))
        return
    if not isinstance(value, dict):
        errors.append("%s: expected an object (%s), got %s" % (path, type_name, type(value).__name__))
        return
    for k, v in value.items():
        if k not in fields:
            errors.append("%s: unknown field (not in %s)" % (member(path, k), type_name))
            continue
        check(v, fields[k][1], member(path, k), errors)
    for r in sorted(r for r in required if value.get(r) is None):
        errors.append("%s: required field missing (%s)" % (member(path, r), type_name))
