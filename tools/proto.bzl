"""Generates C++ (and optionally gRPC) code from .proto files with the system protoc.

Nothing is downloaded: protoc and grpc_cpp_plugin come from Debian's packages.
"""

def weft_proto_library(name, srcs, deps = [], grpc = False, visibility = None):
    """A cc_library `name` holding the generated code of `srcs`.

    Args:
      name: target name.
      srcs: .proto files in this package.
      deps: other weft_proto_library targets whose protos these import.
      grpc: also generate service stubs with grpc_cpp_plugin.
      visibility: visibility of the library.
    """
    outs_h = []
    outs_cc = []
    for s in srcs:
        base = s[:-len(".proto")]
        outs_h.append(base + ".pb.h")
        outs_cc.append(base + ".pb.cc")
        if grpc:
            outs_h.append(base + ".grpc.pb.h")
            outs_cc.append(base + ".grpc.pb.cc")

    dep_srcs = [d + "_srcs" for d in deps]
    grpc_flags = ""
    if grpc:
        grpc_flags = "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin "

    native.filegroup(
        name = name + "_srcs",
        srcs = srcs + dep_srcs,
        visibility = ["//visibility:public"],
    )
    native.genrule(
        name = name + "_gen",
        srcs = srcs + dep_srcs,
        outs = outs_h + outs_cc,
        cmd = ("/usr/bin/protoc -I. --cpp_out=$(GENDIR) " + grpc_flags +
               " ".join(["$(location " + s + ")" for s in srcs])),
    )
    native.cc_library(
        name = name,
        srcs = outs_cc,
        hdrs = outs_h,
        deps = deps + ["//third_party:protobuf"] + (["//third_party:grpc"] if grpc else []),
        visibility = visibility,
    )
