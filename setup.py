"""The packages, found: ``kirolearn`` and its subpackages, and the top-level folders the
design names (``supervisor``, ``shims``, ``configs``) installed under ``kirolearn.``.
Everything else is declared in pyproject.toml."""

from setuptools import find_packages, setup

FOLDERS = {"kirolearn.supervisor": "supervisor", "kirolearn.shims": "shims",
           "kirolearn.configs": "configs"}

packages = find_packages(include=["kirolearn", "kirolearn.*"])
for name, folder in FOLDERS.items():
    packages += [name, *(f"{name}.{sub}" for sub in find_packages(folder))]

setup(packages=packages, package_dir={"kirolearn": "kirolearn", **FOLDERS})
