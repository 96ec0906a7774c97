"""Tests of tools/check_structure.py: each rule on a small tree made here
that breaks it (and one that keeps it), then the rules on weft's own tree."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_structure  # noqa: E402


def write(root, path, text):
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


def function(name, body_lines):
    return "void %s() {\n%s}\n" % (name, "  x();\n" * body_lines)


def test_an_include_from_a_lower_floor_is_refused(tmp_path):
    write(tmp_path, "runtime/a.cc", '#include "master/job_runner.h"\n#include "graph/graph.h"\n')
    breaches = check_structure.check(str(tmp_path))
    assert len(breaches) == 1, breaches
    assert breaches[0].startswith("runtime/a.cc:1: floors: runtime includes master/job_runner.h")
    assert "a floor above" in breaches[0]


def test_packages_on_one_floor_do_not_include_each_other(tmp_path):
    # worker is below ps, so ps may include worker but not the reverse.
    write(tmp_path, "ps/a.cc", '#include "worker/worker.h"\n')
    assert check_structure.check(str(tmp_path)) == []
    write(tmp_path, "worker/b.cc", '#include "ps/accumulator.h"\n')
    breaches = check_structure.check(str(tmp_path))
    assert [b.split(":")[0] for b in breaches] == ["worker/b.cc"], breaches


def test_tests_and_tools_may_include_anything(tmp_path):
    write(tmp_path, "tests/a_test.cc", '#include "client/weft.h"\n#include "master/master.h"\n')
    write(tmp_path, "master/a_test.cc", '#include "client/master_client.h"\n')
    breaches = check_structure.check(str(tmp_path))
    # tests/ is on top; a test inside master/ is still on master's floor.
    assert [b.split(":")[0] for b in breaches] == ["master/a_test.cc"], breaches


def test_grpc_includes_need_an_adapter_name(tmp_path):
    write(tmp_path, "worker/tensor_coding.h", "#include <grpcpp/support/byte_buffer.h>\n")
    write(tmp_path, "worker/grpc_tensor_coding.h", "#include <grpcpp/support/byte_buffer.h>\n")
    write(tmp_path, "worker/worker_server.cc", '#include "grpcpp/server.h"\n')
    write(tmp_path, "client/daemon_commands.cc", "#include <grpcpp/grpcpp.h>\n")
    breaches = check_structure.check(str(tmp_path))
    assert [b.split(":")[0] for b in breaches] == ["worker/tensor_coding.h"], breaches
    assert "grpc:" in breaches[0]


def test_long_files_and_functions_are_refused_outside_tests(tmp_path):
    write(tmp_path, "common/big.cc", "int x;\n" * 451)
    write(tmp_path, "common/ok.cc", "int x;\n" * 450)
    write(tmp_path, "common/big_test.cc", "int x;\n" * 900 + function("Long", 200))
    write(tmp_path, "graph/f.cc", function("Short", 78) + function("TooLong", 79))
    breaches = check_structure.check(str(tmp_path))
    assert sorted(breaches) == [
        "common/big.cc:1: size: 451 lines, more than 450",
        "graph/f.cc:81: size: function TooLong is 81 lines, more than 80",
    ], breaches


def test_function_lengths_see_through_comments_strings_and_classes(tmp_path):
    text = (
        "namespace weft {\n"
        "namespace {\n"
        "// a brace in a comment {\n"
        "class Rewriter {\n"
        " public:\n"
        "  void Member() {\n" + "    y();\n" * 85 + "  }\n"
        "};\n"
        "}  // namespace\n"
        "const char* kText = \"{ not a block\";\n"
        "const char* kRaw = R\"(\n{\n{\n)\";\n"
        "#define OPEN {\n"
        "int Fine(int a) {\n  if (a) {\n    return 1;\n  }\n  return [] { return 2; }();\n}\n"
        "}  // namespace weft\n"
    )
    found = check_structure.long_functions(text, 80)
    assert found == [("Member", 6, 87)], found


def test_the_command_line_reports_and_fails(tmp_path):
    write(tmp_path, "runtime/a.cc", '#include "client/x.h"\n')
    script = os.path.join(HERE, "check_structure.py")
    run = subprocess.run([sys.executable, script, "--root", str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 1
    assert "runtime/a.cc:1: floors" in run.stdout
    write(tmp_path, "runtime/a.cc", '#include "graph/x.h"\n')
    run = subprocess.run([sys.executable, script, "--root", str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout


def weft_root():
    # The runfiles hold links to the checkout's files: follow one back.
    root = os.path.dirname(os.path.dirname(os.path.realpath(os.path.join(HERE, "check_structure.py"))))
    for package in ("common", "graph", "runtime", "master", "client"):
        if not os.path.isdir(os.path.join(root, package)):
            pytest.fail("cannot find weft's source tree from %s (no %s/)" % (root, package))
    return root


def test_weft_keeps_its_own_rules():
    breaches = check_structure.check(weft_root())
    assert breaches == [], "\n".join(breaches)
