"""pip's path to the canopy package: CMake builds canopy._canopy for this interpreter (the
library, no tests, benchmarks or examples) and the pure-Python files come from python/canopy.
CANOPY_CUDA_ARCHS picks the CUDA architectures (default 90), CANOPY_PIP_BUILD_DIR the folder."""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution


class CMakeBuild(build_py):
    def run(self):
        super().run()
        here = os.path.dirname(os.path.abspath(__file__))
        build = os.environ.get("CANOPY_PIP_BUILD_DIR", os.path.join(here, "build-pip"))
        subprocess.check_call(["cmake", "-S", here, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                               "-DCANOPY_BUILD_TESTS=OFF", "-DCANOPY_BUILD_BENCHMARKS=OFF",
                               "-DCANOPY_BUILD_EXAMPLES=OFF", "-DCANOPY_BUILD_PYTHON=ON",
                               f"-DCANOPY_PYTHON={sys.executable}",
                               f"-DCMAKE_CUDA_ARCHITECTURES={os.environ.get('CANOPY_CUDA_ARCHS', '90')}"])
        subprocess.check_call(["cmake", "--build", build, "--target", "_canopy", "-j", str(os.cpu_count() or 2)])
        built = glob.glob(os.path.join(build, "python", "canopy", "_canopy*.so"))
        if not built:
            sys.exit("setup.py: CMake did not build canopy._canopy (are pybind11 and Python's headers installed?)")
        shutil.copy(built[0], os.path.join(self.build_lib, "canopy"))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(name="canopy", version="0.1.0", description="GPU tree traversals and forest inference",
      packages=["canopy"], package_dir={"": "python"}, python_requires=">=3.9",
      install_requires=["numpy"], cmdclass={"build_py": CMakeBuild}, distclass=BinaryDistribution)
