"""The package works outside this checkout: a built wheel, installed into a fresh virtual
environment, finds its Hydra configs through the package, and its console scripts (train,
translate, average, the length study, the explorer) run from an empty folder."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
from conftest import REPO_ROOT


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_runs_every_command_from_an_empty_folder(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", str(REPO_ROOT), "--no-deps", "-q", "-w", str(wheels)]
    try:  # offline-friendly: build with this environment's setuptools when it has a recent one
        import setuptools

        if int(setuptools.__version__.split(".")[0]) >= 68:
            build.append("--no-build-isolation")
    except ImportError:
        pass
    subprocess.run(build, check=True, capture_output=True, timeout=600)
    (wheel,) = wheels.glob("nmt-*.whl")

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    fresh_python = env_dir / "bin" / "python"
    purelib = Path(subprocess.run([str(fresh_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())  # fmt: skip
    # the dependencies (torch...) come from this environment; nmt itself only from the wheel
    (purelib / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(fresh_python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=600)  # fmt: skip

    empty = tmp_path / "elsewhere"
    empty.mkdir()
    show = "import nmt, nmt.configs; print(nmt.__file__); print(nmt.configs.CONFIG_DIR)"
    where = subprocess.run([str(fresh_python), "-c", show], cwd=empty, capture_output=True, text=True,
                           check=True).stdout.split()  # fmt: skip
    assert all(Path(p).is_relative_to(purelib) for p in where), where  # not this checkout
    train = subprocess.run([str(env_dir / "bin" / "nmt-train"), "experiment=smoke", "train.max_epochs=1",
                            "hydra.run.dir=run", "train.threads=1"], cwd=empty, capture_output=True, text=True,
                           timeout=600)  # fmt: skip
    assert train.returncode == 0, train.stderr[-3000:]
    assert (empty / "run" / "checkpoints" / "best.pt").is_file() and (empty / "data" / "spm").is_dir()
    translate = subprocess.run([str(env_dir / "bin" / "nmt-translate"), "ckpt=run/checkpoints/best.pt"], cwd=empty,
                               input="ana bel\n", capture_output=True, text=True, timeout=300)  # fmt: skip
    assert translate.returncode == 0 and translate.stdout.count("\n") == 1, translate.stderr[-3000:]
    # the explorer's page ships in the wheel and its command starts from it
    page = subprocess.run([str(fresh_python), "-c", "import nmt.demo; print(len(nmt.demo.page()))"], cwd=empty,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert page.returncode == 0 and int(page.stdout) > 1000, page.stderr[-3000:]
    assert (env_dir / "bin" / "nmt-demo").is_file()
    # scoring and aligning what it translated, from the wheel's console scripts
    (empty / "in.txt").write_text("ana bel\n", encoding="utf-8")
    (empty / "out.txt").write_text(translate.stdout, encoding="utf-8")
    for script in ("nmt-score", "nmt-align"):
        done = subprocess.run([str(env_dir / "bin" / script), "ckpt=run/checkpoints/best.pt", "src=in.txt", "tgt=out.txt"],
                              cwd=empty, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert done.returncode == 0 and done.stdout.count("\n") == 1, done.stderr[-3000:]
    # averaging the run's last two checkpoints (experiment=smoke keeps two)
    average = subprocess.run([str(env_dir / "bin" / "nmt-average"), "run", "--last", "2"], cwd=empty,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert average.returncode == 0, average.stderr[-3000:]
    assert (empty / "run" / "checkpoints" / "averaged.pt").is_file()
    # the length study, tiny: both models, a few updates each, scored by length on the synthetic test set
    study = subprocess.run([str(env_dir / "bin" / "nmt-study"), "--data", "synthetic", "--out", "study", "--budget",
                            "max_steps=6", "--", "data.train_size=200", "data.valid_size=20", "data.test_size=60",
                            "model.emb_dim=16", "model.encoder.hidden_dim=16", "model.decoder.hidden_dim=32",
                            "train.threads=1", "train.eval_every=3"], cwd=empty, capture_output=True, text=True,
                           timeout=900)  # fmt: skip
    assert study.returncode == 0, study.stderr[-3000:]
    assert (empty / "study" / "summary.md").is_file() and (empty / "study" / "test" / "bleu_by_length.png").is_file()
    report = (empty / "study" / "test" / "seed1234" / "eval.json").read_text()
    assert '"none"' in report and '"bahdanau"' in report


# A version each dependency floor must exclude, and why (pyproject.toml says the same beside it).
UNSAFE = {
    "torch": ("2.9.1", "torch.load(weights_only=True) of a crafted file can corrupt memory (GHSA-63cw-57p8-fm3p)"),
    "sentencepiece": ("0.2.1", "a vocabulary with a piece over ~100 KB crashes the process (google/sentencepiece#1263)"),
    "datasets": ("2.19.2", "load_dataset runs a repository's loading script without asking"),
    "tqdm": ("4.66.2", "arguments of its command line are evaluated as Python (CVE-2024-34062)"),
}


def test_dependency_floors_exclude_versions_known_to_crash_or_run_code() -> None:
    tomllib = pytest.importorskip("tomllib")
    from importlib.metadata import version

    from packaging.requirements import Requirement

    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        declared = {r.name: r for r in map(Requirement, tomllib.load(f)["project"]["dependencies"])}
    for name, (unsafe, why) in UNSAFE.items():
        assert unsafe not in declared[name].specifier, f"{declared[name]} admits {name} {unsafe}: {why}"
    for name, requirement in declared.items():
        assert version(name) in requirement.specifier, f"installed {name} {version(name)} is not {requirement}"
