"""Packaging: environment.yml (conda cannot run here) lists what pyproject.toml installs; the
core install is torch alone; a built wheel carries what the CLI needs; the LICENSE exists; the
repository stands alone (nothing points outside it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from logra import notebooks
from logra.config import packaged_experiments

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"torch": "pytorch"}  # PyPI name -> conda-forge name where they differ
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def requirement_name(spec: str) -> str:
    return re.split(r"[<>=!~\[; ]", spec.strip(), maxsplit=1)[0].lower()


def pyproject_requirements() -> dict[str, str]:
    """Every requirement of the core and the extras; an extra naming another (logra[repro])
    adds nothing of its own."""
    specs = list(PROJECT["dependencies"])
    for extra in PROJECT["optional-dependencies"].values():
        specs += [s for s in extra if requirement_name(s) != PROJECT["name"]]
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


def test_the_core_install_is_torch_alone_and_the_extras_cover_the_rest() -> None:
    assert [requirement_name(s) for s in PROJECT["dependencies"]] == ["torch"]
    extras = PROJECT["optional-dependencies"]
    assert {"repro", "notebooks", "baselines", "trl", "test"} <= set(extras)
    assert "jupyterlab" in map(requirement_name, extras["notebooks"])  # the README opens them
    assert "logra[repro]" in extras["notebooks"]  # executing a notebook imports everything
    makefile = (REPO / "Makefile").read_text()
    installed = re.search(r'pip install --quiet -e "\.\[([a-z,]+)\]"', makefile).group(1)
    assert sorted(installed.split(",")) == sorted(extras)  # make test installs every extra


def test_the_license_is_the_one_pyproject_promises() -> None:
    assert PROJECT["license"] == "MIT" and PROJECT["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License") and "The LoGRA reproduction kit authors" in text


# A torch-only install, emulated: a None in sys.modules makes `import NAME` raise
# ModuleNotFoundError and importlib.util.find_spec(NAME) return None, as for an absent package.
BLOCK_EXTRAS = """
import sys
BLOCKED = {"transformers", "datasets", "peft", "pandas", "matplotlib", "yaml", "math_verify",
           "papermill", "tqdm", "numpy", "trl"}
sys.modules.update(dict.fromkeys(BLOCKED))
"""


def run_python(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **env}, timeout=300)


def test_the_optimizer_imports_and_steps_with_torch_alone() -> None:
    result = run_python(BLOCK_EXTRAS + """
import torch
from logra import LoGRA
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8))
optimizer = LoGRA(model.parameters(), lr=1e-2, rank=4, predicted_kl_threshold=None)
before = [p.detach().clone() for p in model.parameters()]
model(torch.randn(16, 32)).pow(2).mean().backward()
optimizer.step()
moved = [not torch.equal(a, b) for a, b in zip(before, model.parameters())]
print(all(moved), sorted(name for name in BLOCKED if sys.modules[name] is not None))
""", REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "True []"


def test_the_cli_without_the_extras_helps_and_names_them() -> None:
    result = run_python(BLOCK_EXTRAS + """
from logra import cli
try:
    cli.main(["--help"])
except SystemExit as exit_:
    assert exit_.code == 0
print("run:", cli.main(["run", "grpo", "--scale", "smoke"]))
""", REPO)
    assert result.returncode == 0, result.stderr
    assert "00_claims" in result.stdout and "logra[repro" in result.stdout
    assert "run: 1" in result.stdout and "logra[repro,notebooks]" in result.stderr


def test_config_and_paths_sit_at_the_bottom() -> None:
    """Every layer may import them: they import no other layer, and yaml only to read a file."""
    result = run_python(BLOCK_EXTRAS + """
from logra import config, paths
higher = ("experiments", "rl", "models", "data", "memory", "integrations")
print(sorted(m for m in sys.modules if m.startswith("logra.") and m.split(".")[1] in higher))
""", REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "[]"


def tracked_files() -> list[str]:
    """The repository's files (committed or new, not ignored); skips outside a git checkout."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, check=True, capture_output=True, text=True).stdout
    return [path for path in listed.splitlines() if (REPO / path).exists()
            or (REPO / path).is_symlink()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built (no downloads) from a copy of the working tree."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    for path in tracked_files():
        target = source / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / path, target, follow_symlinks=False)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(tmp / "dist"), str(source)],
                   check=True, capture_output=True, timeout=300)
    [built] = (tmp / "dist").glob("logra-*.whl")
    return built


def test_the_wheel_carries_the_package_configs_notebooks_and_license(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "logra").rglob("*.py")
               if "resources" not in p.parts}
    configs = {f"logra/resources/experiments/{p.relative_to(REPO / 'experiments').as_posix()}"
               for p in (REPO / "experiments").rglob("*.yaml")}
    notebook_files = {f"logra/resources/notebooks/{name}.ipynb" for name in notebooks.ordered()}
    assert modules <= names and configs <= names and notebook_files <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)


def test_the_cli_finds_its_experiments_in_an_installed_wheel(wheel: Path, tmp_path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = run_python("""
import json
import logra
from logra import config, notebooks, paths
from logra.data.tasks import DATA_DIR
from logra.experiments.report import FIGURES_DIR
from logra.models.build import MODELS_DIR
from logra.rl import resolve
print(json.dumps({
    "package": logra.__file__,
    "checkout": paths.checkout_root() is not None,
    "experiments": config.packaged_experiments(),
    "notebooks": sorted(p.stem for p in notebooks.NOTEBOOKS_DIR.glob("*.ipynb")),
    "grpo smoke model": resolve("grpo", "smoke").model,
    "results": str(paths.results_root()),
    "models": str(MODELS_DIR),
    "data": str(DATA_DIR),
    "figures": str(FIGURES_DIR),
    "claims parameters": sorted(notebooks.declared_parameters("00_claims")),
}))
""", elsewhere, PYTHONPATH=str(site))
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    assert Path(found["package"]).is_relative_to(site) and not found["checkout"]
    assert found["experiments"] == packaged_experiments()
    assert found["notebooks"] == sorted(notebooks.ordered())
    assert found["grpo smoke model"] == "smoke"
    assert found["results"] == str(elsewhere / "results")  # not inside site-packages
    assert found["models"] == str(elsewhere / "results" / "models")
    assert found["data"] == str(elsewhere / "results" / "data")
    assert found["figures"] == str(elsewhere / "figures")
    assert "rewrite_readme" in found["claims parameters"]


def test_the_repository_stands_alone() -> None:
    """No file points at the team's notes outside the repository."""
    outside = ("../" + "shared", "DESIGN" + " §")  # spelled apart so this file passes
    offenders = [(path, marker) for path in tracked_files() if (REPO / path).is_file()
                 and not (REPO / path).is_symlink()
                 for marker in outside if marker.encode() in (REPO / path).read_bytes()]
    assert offenders == []


def test_every_design_citation_names_a_section_of_docs_design() -> None:
    sections = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)[ .]",
                              (REPO / "docs" / "design.md").read_text(), re.M))
    cited = {number for path in tracked_files() if path.endswith((".py", ".md"))
             for number in re.findall(r"docs/design\.md §(\d+(?:\.\d+)?)",
                                      (REPO / path).read_text())}
    assert cited and cited <= sections, sorted(cited - sections)


def test_every_results_citation_names_a_section_of_docs_results() -> None:
    """A citation `docs/results.md, "TITLE` (the quote may break across lines) opens the title
    of one of its sections, so a section renamed or moved leaves no dangling citation."""
    headings = re.findall(r"^## (.+)$", (REPO / "docs" / "results.md").read_text(), re.M)
    cited = {" ".join(title.split()) for path in tracked_files()
             if path.endswith((".py", ".md")) and path != "tests/test_packaging.py"
             for title in re.findall(r'docs/results\.md, "([^"]+)', (REPO / path).read_text())}
    assert cited, "no citation found: the pattern no longer matches how the docs cite"
    dangling = sorted(title for title in cited
                      if not any(heading.startswith(title) for heading in headings))
    assert not dangling, dangling
