"""weft_fuzz_target: a libFuzzer target and its corpus regression test.

weft_fuzz_target(name = "X", srcs = [...], deps = [...]) gives

  X             a cc_binary. With --define=fuzz=1 (--config=fuzz) it links
                libFuzzer's driver and fuzzes; otherwise it links
                replay_main.cc, which runs the target once per file named.
  X_regression  a small cc_test that runs X's code on every file of
                corpus/X/ and regressions/X/. Given files, libFuzzer's
                driver also just runs each once, so the test means the same
                in both builds: no input there may crash.

All are tagged "sanitize": `make sanitize` runs them under ASan and UBSan,
where a replay means something; `make test`'s gcc build leaves them out.
"""

def weft_fuzz_target(name, srcs, deps = []):
    inputs = native.glob(["corpus/%s/**" % name, "regressions/%s/**" % name])
    if not inputs:
        fail("fuzz target %s has no seed corpus under tests/fuzz/corpus/%s/" % (name, name))

    native.cc_library(
        name = name + "_lib",
        testonly = True,
        srcs = srcs,
        deps = deps,
        # The only symbol is LLVMFuzzerTestOneInput, which the driver needs.
        alwayslink = 1,
        tags = ["sanitize"],
    )

    driver = select({
        ":fuzzing": [],
        "//conditions:default": [":replay_main"],
    })
    linkopts = select({
        ":fuzzing": ["-fsanitize=fuzzer"],
        "//conditions:default": [],
    })

    # .bazelrc's clang config links with bfd, which has no --start-lib;
    # Bazel's auto-detected toolchain assumes gold's and would pass it.
    features = ["-supports_start_end_lib"]

    native.cc_binary(
        name = name,
        testonly = True,
        features = features,
        deps = [":" + name + "_lib"] + driver,
        linkopts = linkopts,
        tags = ["sanitize"],
    )

    native.filegroup(
        name = name + "_inputs",
        srcs = inputs,
    )

    native.cc_test(
        name = name + "_regression",
        size = "small",
        features = features,
        deps = [":" + name + "_lib"] + driver,
        linkopts = linkopts,
        data = [":" + name + "_inputs"],
        # Files, not directories: libFuzzer's driver would fuzz a directory
        # instead of replaying it.
        args = ["$(locations :%s_inputs)" % name],
        tags = ["sanitize"],
    )
