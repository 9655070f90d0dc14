"""The package works outside this checkout: a built wheel, installed into a fresh virtual
environment, finds its Hydra configs through the package, and its console scripts run from an
empty folder."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
from conftest import REPO_ROOT


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_trains_and_translates_from_an_empty_folder(tmp_path: Path) -> None:
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
    show = "import nmt, nmt.runtime; print(nmt.__file__); print(nmt.runtime.CONFIG_DIR)"
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
