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
template against the core schema.
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
TFJOB_REPLICA_TYPES = {"Chief", "Master", "PS", "Worker", "Evaluator"}
TFJOB_RESTART_POLICIES = {"Always", "OnFailure", "Never", "ExitCode"}


def fields_of(type_name):
    """{json name: (python name or None, type)} and the required json names."""
    if type_name in TFJOB_SCHEMA:
        fields, required = TFJOB_SCHEMA[type_name]
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
    if api == "kubeflow.org/v1" and kind == "TFJob":
        return "TFJob"
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
