"""environment.yml (conda cannot run here) must list what pyproject.toml installs."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
import yaml

REPO = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"torch": "pytorch"}  # PyPI name -> conda-forge name where they differ


def requirement_name(spec: str) -> str:
    return re.split(r"[<>=!~\[; ]", spec.strip(), maxsplit=1)[0].lower()


def pyproject_requirements() -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        specs += extra
    return {CONDA_NAMES.get(requirement_name(s), requirement_name(s)): s for s in specs}


def conda_requirements() -> dict[str, str]:
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    specs = []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            specs += [s for s in dep["pip"] if not s.startswith("-")]
        elif requirement_name(dep) not in {"python", "pip"}:
            specs.append(dep)
    return {requirement_name(s): s for s in specs}


def test_environment_yml_lists_the_same_dependencies_as_pyproject() -> None:
    pip, conda = pyproject_requirements(), conda_requirements()
    assert sorted(pip) == sorted(conda)
    for name, spec in pip.items():  # same version bounds, up to the package's name
        bound = spec[len(requirement_name(spec)):].replace(" ", "")
        assert conda[name].endswith(bound), (name, spec, conda[name])


def test_torch_is_a_range_not_a_pin() -> None:
    spec = pyproject_requirements()["pytorch"]
    assert ">=" in spec and "==" not in spec
