"""The command line: --version, help with examples, notebooks and scales, exit codes, where a
reproduction and a run write, progress. Notebooks are stubbed except in the clone test."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

import logra
from logra import cli, notebooks, paths
from logra.models.determinism import PIN_THREADS, pinned_environment
from logra.rl.config import GRPOConfig

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_compute(monkeypatch):
    """Proxy builds, notebooks and GRPO runs that fail the test if anything reaches them."""
    def fail(*args, **kwargs):
        raise AssertionError("compute started")

    monkeypatch.setattr("logra.models.prepare", fail)
    monkeypatch.setattr(notebooks, "execute", fail)
    monkeypatch.setattr("logra.rl.run_grpo", fail)


@pytest.fixture
def executed(monkeypatch) -> list[tuple[str, dict, Path]]:
    """Stub notebooks and proxy builds; the list collects (notebook, parameters, executed dir)."""
    calls: list[tuple[str, dict, Path]] = []
    monkeypatch.setattr("logra.models.prepare", lambda model, **kw: model)
    monkeypatch.setattr(notebooks, "execute",
                        lambda name, params, executed_dir: calls.append((name, params,
                                                                         Path(executed_dir))))
    # a stubbed default-scale run must not write its (empty) wall times into figures/
    save = notebooks.save_wall_times
    monkeypatch.setattr(notebooks, "save_wall_times",
                        lambda seconds, scale, figures_dir, **kw: None
                        if Path(figures_dir).resolve() == REPO / "figures"
                        else save(seconds, scale, figures_dir, **kw))
    return calls


def exit_code(argv: list[str]) -> int:
    """What `logra-repro ARGV` exits with: argparse's own errors raise SystemExit, the
    commands' usage errors return their code."""
    try:
        return cli.main(argv)
    except SystemExit as exit_:
        return exit_.code


def test_version(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"logra-repro {logra.__version__}"


def test_help_gives_examples_and_every_notebook_with_its_scales() -> None:
    text = cli.build_parser().format_help()
    assert "examples:" in text and "logra-repro reproduce --scale smoke" in text
    lines = {line.split()[0]: line for line in text.splitlines()
             if re.match(r"  \d\d_", line)}
    assert sorted(lines) == sorted(notebooks.ordered())
    for name, experiment in notebooks.NOTEBOOKS.items():
        spec = yaml.safe_load((REPO / "experiments" / f"{experiment}.yaml").read_text())
        assert lines[name].split(None, 1)[1] == ", ".join(spec["scales"]), name
    assert "any" in lines[notebooks.CLAIMS_NOTEBOOK]


@pytest.mark.parametrize("argv", [
    ["reproduce", "--only"],                          # no names: not "everything"
    ["reproduce", "--only", "99_missing"],
    ["reproduce", "--scale", "huge"],
    ["reproduce", "--scale", "1.5b"],                 # only some notebooks have it
    ["reproduce", "--scale", "smoke", "--bogus"],
    ["run", "grpo", "lr"],
    ["run", "grpo", "--scale", "huge"],
    ["run", "no_such_experiment"],
    ["run", "sketch_error", "--scale", "smoke"],      # not a GRPO config
    ["prepare", "--scale", "huge"],
    ["reproduce", "--scale", "smoke", "--check"],     # smoke tables are not the committed ones
    ["frobnicate"],
], ids=lambda argv: " ".join(argv))
def test_usage_errors_exit_2_before_any_compute(argv, no_compute, capsys) -> None:
    assert exit_code(argv) == 2
    assert "usage:" in capsys.readouterr().err


def test_a_scale_some_notebooks_lack_names_those_that_have_it(no_compute, capsys) -> None:
    assert exit_code(["reproduce", "--scale", "1.5b"]) == 2
    err = capsys.readouterr().err
    having = [n for n, s in notebooks.notebook_scales().items() if "1.5b" in s]
    assert "03_kl_trajectories" in having and "01_sketch_error" not in having
    assert f"--only {' '.join(having)}" in err and "01_sketch_error" in err


def test_the_readme_s_gpu_scale_runs_with_only(executed, tmp_path) -> None:
    code = cli.main(["reproduce", "--scale", "1.5b", "--only", "03_kl_trajectories",
                     "--results-dir", str(tmp_path)])
    assert code == 0
    [(name, params, executed_dir)] = executed
    assert name == "03_kl_trajectories" and params["scale"] == "1.5b"
    assert params["figures_dir"] == str(tmp_path / "1.5b" / "figures")
    assert params["results_dir"] == str(tmp_path)
    assert executed_dir == tmp_path / "1.5b" / "notebooks"


def test_only_the_default_scale_owns_figures_and_the_readme(executed, tmp_path) -> None:
    seconds = notebooks.reproduce("smoke", results_dir=tmp_path, log=lambda _: None)
    assert [name for name, _, _ in executed] == notebooks.ordered() == list(seconds)[1:]
    smoke_figures = tmp_path / "smoke" / "figures"
    assert {params["figures_dir"] for _, params, _ in executed} == {str(smoke_figures)}
    claims = executed[-1][1]
    assert claims["readme"] == "" and claims["rewrite_readme"] is False
    # a complete run's wall times: under the results, among the figures only when asked
    assert (tmp_path / "reproduce_time_smoke.csv").exists()
    assert not (smoke_figures / "reproduce_time_smoke.csv").exists()
    assert "results_dir" not in executed[0][1]  # 01_sketch_error does not declare it

    executed.clear()
    notebooks.reproduce("smoke", only=["00_claims"], results_dir=tmp_path, rewrite_readme=True,
                        log=lambda _: None)
    assert executed[0][1]["readme"] == str(REPO / "README.md")  # asked for explicitly

    executed.clear()
    notebooks.reproduce("default", only=["00_claims"], results_dir=tmp_path, log=lambda _: None)
    [(_, params, executed_dir)] = executed
    assert params["figures_dir"] == str(REPO / "figures")
    assert params["readme"] == str(REPO / "README.md")
    assert executed_dir == tmp_path / "notebooks"

    executed.clear()  # the default scale's figures written elsewhere: the README is not theirs
    notebooks.reproduce("default", only=["00_claims"], results_dir=tmp_path,
                        figures_dir=tmp_path / "elsewhere", log=lambda _: None)
    [(_, params, _)] = executed
    assert params["readme"] == "" and params["rewrite_readme"] is False


def test_a_param_reaches_the_notebooks_that_declare_it_and_records_no_times(executed,
                                                                            tmp_path) -> None:
    """`-p NAME=VALUE` is parsed as YAML and given only to the chosen notebooks whose
    parameters cell declares NAME; a run with one does part of the work, so no wall times."""
    code = cli.main(["reproduce", "--scale", "smoke", "--only", "02_memory", "09_kl_control",
                     "-p", "studies=[budget]", "--param", "seeds=[1, 2]",
                     "--results-dir", str(tmp_path)])
    assert code == 0
    params = {name: params for name, params, _ in executed}
    assert params["09_kl_control"]["studies"] == ["budget"]
    assert params["09_kl_control"]["seeds"] == [1, 2]
    assert "studies" not in params["02_memory"] and "seeds" not in params["02_memory"]
    assert not (tmp_path / "reproduce_time_smoke.csv").exists()


@pytest.mark.parametrize(("pair", "message"), [
    ("studie=[budget]", "has a parameter 'studie'; theirs: ['seeds', 'steps', 'studies']"),
    ("figures_dir=/tmp/x", "set by reproduce's own options"),
    ("studies", "is not NAME=VALUE"),
    ("studies=[budget", "is not YAML"),
])
def test_a_bad_param_exits_2_naming_it_before_any_compute(no_compute, capsys, pair,
                                                          message) -> None:
    assert exit_code(["reproduce", "--only", "09_kl_control", "-p", pair]) == 2
    assert message in capsys.readouterr().err


def test_check_compares_the_regenerated_figures_with_head_s(executed, monkeypatch,
                                                             tmp_path) -> None:
    """`reproduce --check` regenerates into <results>/check/figures, emptied first, never over
    the committed figures/ (git status stays clean), runs `python -m logra.check` on that
    directory and exits with its code (1: a table moved outside its tolerance); the README is
    left alone."""
    calls = []
    monkeypatch.setattr("logra.check.main", lambda argv: calls.append(argv) or 1)
    stale = tmp_path / "check" / "figures" / "memory.csv"  # an earlier check's table
    stale.parent.mkdir(parents=True)
    stale.write_text("a\n1\n")
    code = cli.main(["reproduce", "--only", "07_optimizer_cost", "--results-dir", str(tmp_path),
                     "--check"])
    fresh = str(tmp_path / "check" / "figures")
    assert code == 1 and calls == [[fresh]]
    assert not stale.exists()  # compared would be a table this run did not regenerate
    assert executed[0][1]["figures_dir"] == fresh
    assert executed[0][1].get("rewrite_readme", False) is False


def test_a_failing_notebook_exits_1(monkeypatch, tmp_path, capsys) -> None:
    def fail(name, params, executed_dir):
        raise notebooks.NotebookFailed(f"notebook {name} failed in cell 3")

    monkeypatch.setattr(notebooks, "execute", fail)
    code = cli.main(["reproduce", "--scale", "smoke", "--only", "02_memory",
                     "--results-dir", str(tmp_path)])
    assert code == 1 and "02_memory failed in cell 3" in capsys.readouterr().err


def test_reproduce_shows_papermill_progress_and_times_each_notebook(monkeypatch, tmp_path,
                                                                     capsys) -> None:
    import papermill

    calls = []
    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **kw: calls.append(kw))
    monkeypatch.setattr("logra.models.prepare", lambda model, **kw: model)
    assert cli.main(["reproduce", "--scale", "smoke", "--only", "02_memory", "05_long_horizon",
                     "--results-dir", str(tmp_path)]) == 0
    assert [kw["progress_bar"] for kw in calls] == [True, True]
    out = capsys.readouterr().out
    assert "02_memory done in" in out and "05_long_horizon done in" in out


def test_run_takes_any_config_file_and_writes_where_told(monkeypatch, tmp_path) -> None:
    runs: list[GRPOConfig] = []

    def run_grpo(config, progress):
        runs.append(config)
        return pd.DataFrame({"step": [0, 1], "eval_accuracy": [0.25, 0.5]})

    monkeypatch.setattr("logra.rl.run_grpo", run_grpo)
    copy = tmp_path / "elsewhere" / "my_grpo.yaml"
    copy.parent.mkdir()
    shutil.copy(REPO / "experiments" / "grpo.yaml", copy)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert cli.main(["run", str(copy), "--scale", "smoke", "--results-dir", str(out),
                     "lr=3e-4", "--quiet"]) == 0
    assert runs[-1].results_dir == str(out) and runs[-1].data_dir == str(out / "data")
    assert runs[-1].lr == 3e-4 and runs[-1].model == "smoke"
    # no --results-dir: the config's results/, under the checkout, not the current directory
    assert cli.main(["run", "grpo", "--scale", "smoke", "--quiet"]) == 0
    assert runs[-1].results_dir == str(paths.checkout_root() / "results")


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


@pytest.mark.slow
def test_a_smoke_reproduction_leaves_a_clone_as_it_was(tmp_path) -> None:
    """A quick try must not touch what is committed: figures/ and the README's claims block.
    The notebooks run here are those with distinct ways of writing (tables written directly,
    GRPO runs and a proxy build, the ledger and the README); every notebook writes through
    the same `figures_dir` parameter, and the full smoke run takes about 3 minutes on two
    busy cores."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    clone = tmp_path / "kit"
    _git("clone", "--quiet", str(REPO), str(clone), cwd=tmp_path)
    diff = _git("diff", "HEAD", "--binary", cwd=REPO)  # the working tree as it is now
    if diff:
        subprocess.run(["git", "apply"], input=diff, text=True, cwd=clone, check=True)
    for path in _git("ls-files", "--others", "--exclude-standard", cwd=REPO).splitlines():
        (clone / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / path, clone / path, follow_symlinks=False)
    before = _git("status", "--porcelain", cwd=clone)
    subprocess.run([sys.executable, "-m", "logra.cli", "reproduce", "--scale", "smoke",
                    "--only", "02_memory", "03_kl_trajectories", "00_claims"],
                   cwd=clone, check=True, capture_output=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert _git("status", "--porcelain", cwd=clone) == before
    ledger = pd.read_csv(clone / "results" / "smoke" / "figures" / "claims.csv")
    assert set(ledger["claim"]) == {f"C{i}" for i in range(1, 13)}



def test_pin_reruns_the_command_in_a_process_under_the_pinned_environment(monkeypatch,
                                                                         no_compute) -> None:
    """The pin's variables must be set before torch loads, so --pin runs the command again in
    a fresh process with them, and exits with that process's status."""
    monkeypatch.delenv(cli.PIN_MARK, raising=False)
    calls = []

    def run(command, env, check):
        calls.append((command, env))
        return subprocess.CompletedProcess(command, 3)

    monkeypatch.setattr(cli.subprocess, "run", run)
    monkeypatch.setattr("logra.experiments.jobs.available_cpus", lambda: 16)
    argv = ["reproduce", "--pin", "avx2", "--scale", "smoke", "--only", "02_memory"]
    assert cli.main(argv) == 3
    [(command, env)] = calls
    assert command == [sys.executable, "-m", "logra.cli", *argv]
    assert env["ATEN_CPU_CAPABILITY"] == "avx2" and env["MKL_CBWR"] == "AVX2,STRICT"
    assert env[cli.PIN_MARK] == "avx2"
    # the thread count is the pin's, not the machine's: an SVD sums by thread count
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == str(PIN_THREADS) == "2"


def test_under_its_pin_the_command_reproduces_in_process(monkeypatch, executed, tmp_path,
                                                         capsys) -> None:
    for key, value in {**pinned_environment("strict"), cli.PIN_MARK: "strict"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(cli.subprocess, "run", lambda *a, **kw: pytest.fail("ran again"))
    assert cli.main(["reproduce", "--pin", "strict", "--scale", "smoke", "--only", "02_memory",
                     "--results-dir", str(tmp_path)]) == 0
    assert [name for name, *_ in executed] == ["02_memory"]
    assert "CPU floating point pinned (strict): ATEN_CPU_CAPABILITY=default" in \
        capsys.readouterr().out
    monkeypatch.setenv("OMP_NUM_THREADS", "16")  # the mark without the pin's threads: refused
    assert cli.main(["reproduce", "--pin", "strict", "--scale", "smoke", "--only", "02_memory",
                     "--results-dir", str(tmp_path)]) == 1
    assert "OMP_NUM_THREADS differ from the pin's" in capsys.readouterr().err
    monkeypatch.setenv("OMP_NUM_THREADS", str(PIN_THREADS))
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx512")  # the mark without the pin: refused
    assert cli.main(["reproduce", "--pin", "strict", "--scale", "smoke", "--only", "02_memory",
                     "--results-dir", str(tmp_path)]) == 1
    assert "ATEN_CPU_CAPABILITY differ from the pin's" in capsys.readouterr().err
    assert len(executed) == 1


def test_run_of_a_partial_config_writes_where_told(monkeypatch, tmp_path) -> None:
    """A config of two keys with --results-dir runs on top of the packaged grpo.yaml."""
    runs: list[GRPOConfig] = []
    monkeypatch.setattr("logra.rl.run_grpo", lambda config, progress: runs.append(config)
                        or pd.DataFrame({"step": [0, 1], "eval_accuracy": [0.25, 0.5]}))
    mine = tmp_path / "mine.yaml"
    mine.write_text("defaults:\n  lr: 1e-4\n  optimizer: adamw\n")
    out = tmp_path / "out"
    assert cli.main(["run", str(mine), "--scale", "smoke", "--results-dir", str(out),
                     "--quiet"]) == 0
    assert runs[-1].results_dir == str(out) and runs[-1].lr == 1e-4
    assert runs[-1].model == "smoke" and runs[-1].optimizer == "adamw"


def test_a_bad_run_config_fails_before_transformers_or_datasets_load(tmp_path) -> None:
    """`logra-repro run` resolves and checks the config with torch alone: a bad value exits 2
    naming the key before the libraries a run needs (5-10 s of imports) are loaded."""
    probe = ("import sys; from logra import cli; code = cli.main(['run', 'grpo', 'lr=fast']); "
             "print(code, sorted({'transformers', 'datasets', 'peft'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=tmp_path, check=True)
    assert done.stdout.split("\n")[-2] == "2 []", done.stdout + done.stderr
    assert "lr must be" in done.stderr


def test_dir_lists_the_lazy_names_without_importing_them(tmp_path) -> None:
    """Tab completion in JupyterLab reads `dir(package)`: the lazily imported names are there
    before first use, and listing them loads neither transformers nor datasets."""
    probe = ("import sys, logra.data, logra.models, logra.rl; "
             "names = set(dir(logra.data)) | set(dir(logra.models)) | set(dir(logra.rl)); "
             "print(sorted({'load_task', 'to_sft', 'load_policy', 'prepare', 'run_grpo', "
             "'COLUMNS'} - names), sorted({'transformers', 'datasets'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=tmp_path, check=True)
    assert done.stdout.strip() == "[] []", done.stdout + done.stderr


def _committed_claims(params: dict[str, dict]) -> set[str] | None:
    """The claim files a check handed 00_claims (None: no directory)."""
    if "committed_claims" not in params.get("00_claims", {}):
        return None
    return {p.name for p in Path(params["00_claims"]["committed_claims"]).iterdir()}


@pytest.mark.parametrize(("argv", "stand_in"), [
    # 09 run in part: its claim files and every skipped notebook's stand in
    (["--only", "09_kl_control", "00_claims", "-p", "studies=[budget]"],
     {"claims_kl_control.csv", "claims_kl_control_bands.csv", "claims_memory.csv"}),
    # 09 run in full: it writes every claim file of its own, so none of HEAD's stands in
    (["--only", "09_kl_control", "00_claims"], {"claims_memory.csv"}),
    # every notebook, 09 in part: 09's alone
    (["-p", "studies=[budget]"], {"claims_kl_control.csv", "claims_kl_control_bands.csv"}),
])
def test_a_partial_check_gives_the_ledger_head_s_claims_for_what_it_skips(
        executed, monkeypatch, tmp_path, argv, stand_in) -> None:
    """A partial `--check` that runs 00_claims hands it git HEAD's claim files for the
    notebooks it skips or runs with a parameter of theirs, and only those; otherwise the ledger
    it compares would hold only this run's rows (or hide a claim file a notebook run in full no
    longer writes)."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    monkeypatch.setattr("logra.check.main", lambda argv: 0)
    assert cli.main(["reproduce", *argv, "--results-dir", str(tmp_path), "--check"]) == 0
    given = _committed_claims({name: params for name, params, _ in executed})
    assert stand_in <= given and all(name.startswith("claims_") for name in given)
    if "-p" not in argv or "--only" in argv:
        assert "claims_memory.csv" in given
    if argv[-1] == "00_claims":  # 09 in full
        assert not any(name.startswith("claims_kl_control") for name in given)
    if "--only" not in argv:
        assert given == {n for n in given if n.startswith("claims_kl_control")}
    committed = tmp_path / "check" / "committed" / "figures" / "claims_kl_control.csv"
    if committed.exists():
        assert committed.read_text() == subprocess.run(
            ["git", "show", "HEAD:figures/claims_kl_control.csv"], cwd=REPO, check=True,
            capture_output=True, text=True).stdout


def test_a_check_without_the_ledger_or_of_everything_hands_it_nothing(
        executed, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr("logra.check.main", lambda argv: 0)
    assert cli.main(["reproduce", "--only", "07_optimizer_cost", "--results-dir",
                     str(tmp_path), "--check"]) == 0
    assert not (tmp_path / "check" / "committed").exists()
    assert cli.main(["reproduce", "--results-dir", str(tmp_path), "--check"]) == 0
    assert all("committed_claims" not in params for _, params, _ in executed)


def test_a_partial_check_with_the_ledger_still_records_its_wall_times(
        executed, monkeypatch, tmp_path) -> None:
    """HEAD's claim files reach 00_claims as an option of reproduce, not as a `-p` parameter,
    which would mark the run as partial work and record no times."""
    monkeypatch.setattr("logra.check.main", lambda argv: 0)
    monkeypatch.setattr("logra.check.committed_figures",
                        lambda revision, target: target.mkdir(parents=True) or target)
    assert cli.main(["reproduce", "--results-dir", str(tmp_path), "--check"]) == 0
    times = tmp_path / "reproduce_time_default.csv"
    before = pd.read_csv(times).set_index("step")["seconds"]
    monkeypatch.setattr(notebooks, "execute", lambda name, params, executed_dir: time.sleep(0.2))
    assert cli.main(["reproduce", "--only", "02_memory", "00_claims", "--results-dir",
                     str(tmp_path), "--check"]) == 0
    after = pd.read_csv(times).set_index("step")["seconds"]
    assert after["02_memory"] >= 0.2 > before["02_memory"]


def test_a_check_without_git_s_figures_exits_2_naming_it(executed, monkeypatch, tmp_path,
                                                        capsys) -> None:
    def no_git(revision, target):
        raise FileNotFoundError("[Errno 2] No such file or directory: 'git'")

    monkeypatch.setattr("logra.check.committed_figures", no_git)
    assert cli.main(["reproduce", "--only", "02_memory", "00_claims", "--results-dir",
                     str(tmp_path), "--check"]) == 2
    assert "--check needs git HEAD's figures" in capsys.readouterr().err and not executed


def test_committed_claims_is_reproduce_s_to_set(no_compute, capsys) -> None:
    assert exit_code(["reproduce", "--only", "00_claims", "-p", "committed_claims=/tmp"]) == 2
    assert "set by reproduce's own options" in capsys.readouterr().err
