"""``mqtool[spark]`` from an ordinary install, tried as a new user would: ``pip install`` into a
fresh venv that is not activated, the console script called by its absolute path with the
system PATH, an executor Python without the dependencies, and ``spark-submit`` with the zip
mqtool ships. Each runs its own Spark in a child process (a module of its own, so that a
parallel test run can start these JVMs beside the in-process audits of test_spark.py).

Expected counts come from the single-process record stream of the same store, not from Spark.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from conftest import FIXTURE_STORE, REPO  # noqa: E402
from mqtool.inspect import iter_commitlog_records  # noqa: E402
from mqtool.store import Store  # noqa: E402

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def fixture_records() -> int:
    """The records of the fixture store, as ``mqtool dump`` counts them."""
    store = Store(FIXTURE_STORE / "store")
    return sum(1 for _ in iter_commitlog_records(store.commitlog, resync=True,
                                                 messages_only=True))


# every requirement mqtool[spark] declares is installed at a version it accepts
DECLARED_SATISFIED = """
from importlib.metadata import requires, version
from packaging.requirements import Requirement
for line in requires("mqtool"):
    req = Requirement(line)
    if req.marker is None or req.marker.evaluate({"extra": "spark"}):
        assert req.specifier.contains(version(req.name), prereleases=True), line
"""


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with ``pip install <checkout>[spark]`` (not editable), from a copy of the
    sources (pip builds in the source tree). Made once per session.

    The venv sees the test interpreter's site-packages, where the test extra put pyspark,
    pyarrow and pandas: pip resolves ``[spark]`` against them instead of unpacking ~500 MB of
    wheels again (60 s of the suite); ``pip check`` proves they satisfy what mqtool declares.
    mqtool itself goes into the venv, which is what these tests are about."""
    base = tmp_path_factory.mktemp("install")
    source = base / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    for name in ("mqtool", "formats"):
        shutil.copytree(REPO / name, source / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                           "--no-compile", f"{source}[spark]"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    installed_at = subprocess.run([str(venv / "bin" / "python"), "-c",
                                   "import mqtool; print(mqtool.__file__)"],
                                  capture_output=True, text=True, cwd=base).stdout
    assert installed_at.startswith(str(venv)), installed_at
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", DECLARED_SATISFIED],
                          capture_output=True, text=True, cwd=base)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return venv


def _clean_env(home: Path, **extra) -> dict:
    """What a new user's shell has: no venv activated, the system PATH."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    for name in ("JAVA_HOME", "TMPDIR"):
        if name in os.environ:
            env[name] = os.environ[name]
    env.update(extra)
    return env


def test_installed_console_script_audits_from_a_clean_environment(installed, fixture_records,
                                                                  tmp_path):
    if shutil.which("java", path="/usr/bin:/bin") is None and "JAVA_HOME" not in os.environ:
        pytest.skip("java is not on the system PATH")
    out = tmp_path / "out"
    # run from inside the source checkout the venv was installed from: its ./mqtool (whose
    # mqtool.formats is ../formats) must not shadow the installed package in the executors
    checkout = installed.parent / "src"
    assert (checkout / "mqtool").is_dir() and (checkout / "formats").is_dir()
    proc = subprocess.run([str(installed / "bin" / "mqtool"), "--no-progress", "spark", "audit",
                           "--master", "local[2]", "--json", "--out", str(out),
                           "--split-size", "256k", str(FIXTURE_STORE / "store")],
                          capture_output=True, text=True, cwd=checkout,
                          env=_clean_env(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["totals"]["records"] == fixture_records
    # a store root verify checks: a task per CommitLog file (verify's checks and the file's
    # rows from one read), whatever the split size
    assert summary["totals"]["errors"] == 0 and summary["tasks"] == 3
    # the executors ran the venv's Python, which imported the installed mqtool
    assert summary["executor_code"] and all(
        origin.startswith(str(installed)) for origin in summary["executor_code"])
    assert (out / "summary.json").is_file()
    assert "Traceback" not in proc.stderr


NOTEBOOK = """\
import os, sys
import mqtool.spark
from pyspark.sql import SparkSession

def session():
    return SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false") \\
        .config("spark.driver.host", "127.0.0.1").getOrCreate()

spark = session()
mqtool.spark.register(spark)
print("rows", spark.read.format("rocketmq").load(sys.argv[1]).count())
spark.stop()
# a session whose executors run a Python without mqtool: register() says so in one line
os.environ["PYSPARK_PYTHON"] = sys.argv[2]
spark = session()
try:
    mqtool.spark.register(spark)
except Exception as err:
    print("refused", type(err).__name__, str(err))
"""


def test_notebook_on_a_venv_kernel_that_is_not_activated(installed, fixture_records, tmp_path):
    """A notebook's cells as a script the venv's Python runs by its path (no activation, the
    system PATH, whose python3 has no mqtool), from a folder outside the checkout: mqtool.spark
    imported before the session, the session built with pyspark's own builder."""
    system_python = shutil.which("python3", path="/usr/bin:/bin")
    if system_python is None or subprocess.run([system_python, "-c", "import mqtool"],
                                               capture_output=True, cwd=tmp_path).returncode == 0:
        pytest.skip("needs a python3 on the system PATH without mqtool")
    script = tmp_path / "notebook.py"
    script.write_text(NOTEBOOK)
    proc = subprocess.run([str(installed / "bin" / "python"), str(script),
                           str(FIXTURE_STORE / "store"), system_python],
                          capture_output=True, text=True, cwd=tmp_path,
                          env=_clean_env(tmp_path, SPARK_LOCAL_IP="127.0.0.1"))
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == f"rows {fixture_records}", proc.stdout
    assert len(lines) == 2 and lines[1].startswith("refused OptionalDependencyError "), proc.stdout
    assert f"executors ({system_python}) cannot import mqtool" in lines[1]
    assert "PYSPARK_PYTHON" in lines[1]


def test_installed_executor_without_dependencies_says_what_to_install(installed, tmp_path):
    system_python = "/usr/bin/python3"
    probe = subprocess.run([system_python, "-c", "import numpy, pyarrow"], capture_output=True) \
        if os.path.exists(system_python) else None
    if probe is None or probe.returncode == 0:
        pytest.skip("needs a system Python without numpy/pyarrow")
    proc = subprocess.run([str(installed / "bin" / "mqtool"), "--no-progress", "spark", "audit",
                           "--master", "local[1]", str(FIXTURE_STORE / "store")],
                          capture_output=True, text=True, cwd=tmp_path,
                          env=_clean_env(tmp_path, PYSPARK_PYTHON=system_python))
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"mqtool: error: an executor's Python ({system_python}) cannot "
                               f"import ")
    assert "install 'mqtool[spark]'" in lines[0]


def test_spark_submit_with_the_shipped_zip(installed, fixture_records, tmp_path):
    python = installed / "bin" / "python"
    made = subprocess.run([str(python), "-c", "from mqtool.spark.session import package_zip; "
                           f"print(package_zip({str(tmp_path)!r}))"],
                          capture_output=True, text=True, cwd=tmp_path, env=_clean_env(tmp_path))
    archive = made.stdout.strip()
    where = subprocess.run([str(python), "-m", "mqtool.spark.submit", "--where"],
                           capture_output=True, text=True, cwd=tmp_path,
                           env=_clean_env(tmp_path)).stdout.strip()
    assert archive.endswith("mqtool.zip") and where.endswith("submit.py")
    out = tmp_path / "out"
    # pip's spark-submit finds its Spark (SPARK_HOME) through PYSPARK_PYTHON
    # pip put spark-submit beside pyspark: in the venv, or (the venv sees the test
    # interpreter's packages) beside the interpreter the venv was made from
    submit = shutil.which("spark-submit", path=os.pathsep.join(
        str(folder) for folder in (installed / "bin", Path(sys.executable).parent,
                                   Path(sys.base_prefix) / "bin")))
    assert submit is not None
    proc = subprocess.run([submit, "--master", "local[2]",
                           "--py-files", archive, where, "audit", "--json", "--out", str(out),
                           str(FIXTURE_STORE / "store")],
                          capture_output=True, text=True, cwd=tmp_path,
                          env=_clean_env(tmp_path, SPARK_LOCAL_IP="127.0.0.1",
                                         PYSPARK_PYTHON=str(python)))
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["totals"]["records"] == fixture_records
