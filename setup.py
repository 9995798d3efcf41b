"""Package discovery only; everything else is in pyproject.toml.

NOTE: the runtime lives in runtime/ but imports as ``sglc_runtime`` so that it cannot collide
with another distribution's top-level ``runtime`` package in site-packages.
"""
from setuptools import find_packages, setup

runtime_packages = [
    "sglc_runtime" + name[len("runtime"):]
    for name in find_packages(include=["runtime", "runtime.*"])
]
setup(
    packages=find_packages(include=["sglc", "sglc.*"]) + runtime_packages,
    package_dir={"sglc_runtime": "runtime"},
    # NOTE: the native kernels' sources are compiled on the user's machine (native/build.py)
    package_data={"sglc": ["py.typed", "grammar/native/*.cpp"],
                  "sglc_runtime.model.native": ["binding/*.cpp", "binding/*.h", "kernels/*.h", "kernels/*.cpp", "kernels/*/*.h",
                                                "kernels/*/*/*.h", "kernels/*/*/*/*.h", "kernels/*/*.cpp"]},
)
