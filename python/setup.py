"""Builds the weft package, generating its gRPC modules from ../proto with
Debian's protoc and grpc_python_plugin (no download): `pip install ./python`."""
import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class BuildWithProtos(build_py):
    def run(self):
        super().run()
        spec = importlib.util.spec_from_file_location("weft_codegen", HERE / "weft" / "_codegen.py")
        codegen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(codegen)
        root = HERE.parent
        if not (root / "proto" / "master_service.proto").is_file():
            raise RuntimeError("proto/ not found beside python/: build from a weft checkout")
        codegen.generate(root, Path(self.build_lib) / "weft" / "_generated")


setup(cmdclass={"build_py": BuildWithProtos})
