"""The Spark session of an audit or export, shipping mqtool to executors, and the driver's
Hadoop FileSystem access (listing non-local inputs, writing the summary next to the tables).

``local[*]`` is the default master: nothing to set up beyond pip and Java. Any other master
(``spark://``, ``yarn``, ``k8s://``) gets mqtool's code as a zip through ``addPyFile``; the
executors need Python with mqtool's dependencies (construct, numpy, pyarrow, pandas) and, for
non-local inputs, the reader of their scheme (s3fs, pyarrow). On local and standalone masters
the executors run this interpreter unless the user chose another
(:func:`choose_executor_python`).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from .environment import require_pyspark
from .plan import ListedEntry, Lister, is_local, local_path

#: settings every mqtool session starts from; ``--conf`` overrides them
DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.session.timeZone": "UTC",
    # broker names such as 0001 must stay strings when tables are read back
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    # damaged records hold any 64-bit value; an overflow must not abort the audit
    "spark.sql.ansi.enabled": "false",
    # tables partitioned by broker and store_date are written by one open file per partition
    # value instead of sorting every task's rows by them first (the planned write would add
    # that sort to the plan whatever the writers)
    "spark.sql.maxConcurrentOutputFileWriters": "64",
    "spark.sql.optimizer.plannedWrite.enabled": "false",
    # Python workers start as ``python -m pyspark.daemon`` in the driver's working directory,
    # which Python puts first on sys.path: run from a source checkout, its ./mqtool (whose
    # mqtool.formats is ../formats) would shadow the installed package (Python 3.11+)
    "spark.executorEnv.PYTHONSAFEPATH": "1",
}

_QUIET_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark: %p %c{1}: %m%n%ex
"""


def is_local_master(master: str | None) -> bool:
    return master is None or master == "local" or master.startswith("local[")


def launched_by_spark_submit() -> bool:
    """True inside ``spark-submit`` (the JVM, and the master it was given, exist already)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _quiet_log_config() -> str:
    path = Path(tempfile.gettempdir()) / "mqtool-spark-log4j2.properties"
    if not path.is_file() or path.read_text() != _QUIET_LOG4J:
        path.write_text(_QUIET_LOG4J)
    return path.as_uri()


def build_session(master: str | None = None, *, app_name: str = "mqtool",
                  conf: dict[str, str] | None = None, progress: bool = False,
                  log_level: str = "OFF"):
    """A SparkSession on ``master`` (default ``local[*]``, or spark-submit's), with mqtool's code
    shipped to executors when they are not this process's children. Spark's own log is off by
    default: a failed task comes back as the job's exception, which the caller reports in one
    line (:func:`spark_failures`); ``log_level="WARN"`` shows Spark's account too."""
    require_pyspark()
    from pyspark.sql import SparkSession

    settings = dict(DEFAULTS)
    builder = SparkSession.builder.appName(app_name)
    submitted = launched_by_spark_submit()
    if master is None and not submitted:
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    if not submitted:
        settings["spark.driver.extraJavaOptions"] = \
            f"-Dlog4j2.configurationFile={_quiet_log_config()}"
        if is_local_master(master):
            # one machine: stay on the loopback interface (no hostname lookups, no firewall)
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            settings["spark.driver.host"] = "127.0.0.1"
            settings["spark.driver.bindAddress"] = "127.0.0.1"
    if progress:
        settings["spark.ui.showConsoleProgress"] = "true"
    settings.update(conf or {})
    if not submitted:
        choose_executor_python(master, settings)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if submitted or progress or log_level != "OFF":
        spark = builder.getOrCreate()
    else:
        with _jvm_output_to(spark_log_path()):
            spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    ship_code(spark)
    return spark


def spark_log_path() -> Path:
    """Where the JVM that this process starts writes its output (banners, Spark's log, the
    executors' Python workers' standard error)."""
    return Path(tempfile.gettempdir()) / f"mqtool-spark-{os.getpid()}.log"


_KEPT_LOGS: set[str] = set()


def _drop_log(path: Path) -> None:
    # a log that an error message points to stays; the others go with the process
    if str(path) not in _KEPT_LOGS:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def _jvm_output_to(path: Path):
    """Start the JVM with its standard error on ``path`` (it inherits this process's file
    descriptor 2): the user's terminal gets mqtool's one-line messages, not Java's."""
    try:
        sys.stderr.flush()
        log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        saved = os.dup(2)
    except OSError:
        yield
        return
    os.dup2(log, 2)
    atexit.register(_drop_log, path)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(log)


def choose_executor_python(master: str | None, settings: dict[str, str]) -> str | None:
    """The Python executors start: the user's (PYSPARK_PYTHON, or ``spark.pyspark.python``
    given with --conf), else this interpreter on local and standalone masters, whose executors
    run on this machine or on workers installed alike (Spark's own default is ``python3`` from
    PATH, which has mqtool only by chance). Returns the choice, None when left to Spark.

    PySpark's driver reads the executors' Python from the PYSPARK_PYTHON environment variable
    when the context starts (``spark.pyspark.python`` alone does not reach it), so the choice
    is put there."""
    from .environment import DEFAULTED_PYTHON

    chosen = os.environ.get("PYSPARK_PYTHON")
    if chosen is not None and chosen == DEFAULTED_PYTHON and not (
            is_local_master(master) or master.startswith("spark://")):
        # importing mqtool.spark chose this interpreter for a session it could not see: a
        # YARN or Kubernetes executor is another machine's Python, left to Spark's settings
        del os.environ["PYSPARK_PYTHON"]
        chosen = None
    python = settings.get("spark.pyspark.python") or chosen
    if python is None and (is_local_master(master) or master.startswith("spark://")):
        python = sys.executable
    if python is not None:
        os.environ["PYSPARK_PYTHON"] = python
        settings["spark.pyspark.python"] = python
    return python


# --- shipping mqtool -----------------------------------------------------------------------------

_SHIPPED: dict[int, str] = {}


def package_zip(directory: str | None = None) -> str:
    """A zip of the importable mqtool package (with mqtool.formats wherever it lives: an
    editable install maps it to the top-level formats/ directory)."""
    import mqtool
    import mqtool.formats

    origin = Path(mqtool.__file__).resolve()
    if ".zip" in origin.as_posix():
        # already running from a zip (spark-submit --py-files): ship that one
        archive = origin.as_posix().split(".zip", 1)[0] + ".zip"
        return archive
    directory = directory or tempfile.mkdtemp(prefix="mqtool-spark-")
    target = Path(directory) / "mqtool.zip"
    sources = [(origin.parent, "mqtool"),
               (Path(mqtool.formats.__file__).resolve().parent, "mqtool/formats")]
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        written = set()
        for root, prefix in sources:
            for path in sorted(root.rglob("*.py")):
                if "__pycache__" in path.parts:
                    continue
                name = f"{prefix}/{path.relative_to(root).as_posix()}"
                if name not in written:
                    archive.write(path, name)
                    written.add(name)
    return str(target)


def ship_code(spark) -> str | None:
    """addPyFile a zip of mqtool unless the executors are local threads of this driver."""
    sc = spark.sparkContext
    if is_local_master(sc.master) or id(sc) in _SHIPPED:
        return _SHIPPED.get(id(sc))
    archive = package_zip()
    sc.addPyFile(archive)
    _SHIPPED[id(sc)] = archive
    if Path(archive).parent.name.startswith("mqtool-spark-"):
        atexit.register(shutil.rmtree, Path(archive).parent, True)
    return archive


def check_executors(spark) -> None:
    """Fail fast, in one line naming PYSPARK_PYTHON, when the session's executors cannot import
    mqtool (a notebook whose session started Spark's default ``python3`` from PATH): a one-task
    job imports what a CommitLog task imports."""
    from ..errors import OptionalDependencyError

    def probe(_):
        # pickled by value (a nested function): runs where mqtool may not import at all
        import sys as worker_sys
        try:
            import mqtool.formats.commitlog  # noqa: F401
            import mqtool.spark.splits  # noqa: F401
        except Exception as err:   # noqa: BLE001 (any import failure is the answer)
            return [(worker_sys.executable, f"{type(err).__name__}: {err}")]
        return [(worker_sys.executable, None)]

    sc = spark.sparkContext
    python = os.environ.get("PYSPARK_PYTHON") or getattr(sc, "pythonExec", None) or "python3"
    try:
        with spark_failures():
            executable, problem = sc.parallelize([0], 1).mapPartitions(probe).collect()[0]
    except OptionalDependencyError:
        raise
    except Exception as err:   # the worker did not even start (no such Python)
        problem, executable = str(err), python
    if problem is not None:
        raise OptionalDependencyError(
            f"this session's executors ({executable}) cannot import mqtool ({problem}): set "
            f"PYSPARK_PYTHON to a Python with mqtool[spark] (this one is {sys.executable}) "
            f"before the session starts, or import mqtool.spark before building it")


# --- failures --------------------------------------------------------------------------------

_MISSING_MODULE = re.compile(r"(?:ModuleNotFoundError|ImportError): No module named '([^']+)'")
_MQTOOL_ERROR = re.compile(r"mqtool\.errors\.(\w+Error): (.+)")
_OS_ERROR = re.compile(r"((?:PermissionError|FileNotFoundError|IsADirectoryError|OSError): .+)")
#: what to install for a module an executor could not import
_PACKAGES = {"mqtool": "mqtool[spark]", "numpy": "mqtool[spark]", "construct": "mqtool[spark]",
             "pyarrow": "mqtool[spark]", "pandas": "mqtool[spark]", "fsspec": "fsspec",
             "s3fs": "s3fs", "pyspark": "mqtool[spark]"}


@contextlib.contextmanager
def spark_failures():
    """Spark's and py4j's exceptions as one-line mqtool errors (:func:`describe_failure`); the
    original stays chained for --debug."""
    from ..errors import MqtoolError

    try:
        yield
    except MqtoolError:
        raise
    except Exception as err:
        if is_spark_failure(err):
            raise describe_failure(err) from err
        raise


def is_spark_failure(err: BaseException) -> bool:
    """An exception that Spark or py4j raised (a failed job, a JVM error)."""
    module = type(err).__module__ or ""
    return module.startswith(("py4j", "pyspark"))


def describe_failure(err: BaseException):
    """A one-line :class:`mqtool.errors.MqtoolError` for a failed Spark job: an executor that
    cannot import a dependency names the package to install; an mqtool or I/O error raised in
    a task keeps its own text; anything else gives the first line of Spark's message."""
    from ..errors import MqtoolError, OptionalDependencyError

    java = getattr(err, "java_exception", None)
    text = str(err)
    if java is not None:
        try:
            text = text + "\n" + java.toString()
        except Exception:   # the JVM is gone
            pass
    missing = _MISSING_MODULE.search(text)
    if missing:
        module = missing.group(1).split(".")[0]
        package = _PACKAGES.get(module, module)
        python = os.environ.get("PYSPARK_PYTHON", "python3")
        if module == "mqtool" and missing.group(1) != "mqtool":
            return OptionalDependencyError(
                f"an executor's Python ({python}) imports an incomplete mqtool (no "
                f"{missing.group(1)}): a source checkout in its working directory shadows the "
                f"installed package (Python 3.10; 3.11+ ignores it): run from another "
                f"directory, or install the checkout with pip install -e")
        return OptionalDependencyError(
            f"an executor's Python ({python}) cannot import {module}: install '{package}' into "
            f"it, or give a Python that has it with PYSPARK_PYTHON or --conf "
            f"spark.pyspark.python")
    own = _MQTOOL_ERROR.search(text)
    if own:
        return MqtoolError(f"a Spark task failed: {own.group(2).strip()}")
    io = _OS_ERROR.search(text)
    if io:
        return MqtoolError(f"a Spark task could not read its input: {io.group(1).strip()}")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else type(err).__name__
    log = spark_log_path()
    where = ""
    if log.is_file():
        _KEPT_LOGS.add(str(log))
        where = f" (Spark's log: {log})"
    return MqtoolError(f"the Spark job failed: {first[:400]}{where}")


# --- the driver's file system access -------------------------------------------------------------

def _hadoop(spark, url: str):
    sc = spark.sparkContext
    path = sc._jvm.org.apache.hadoop.fs.Path(url)
    return path, path.getFileSystem(sc._jsc.hadoopConfiguration())


def hadoop_lister(spark) -> Lister:
    """List directories of any scheme the session's Hadoop configuration can read."""
    from ..errors import OptionalDependencyError, StoreLayoutError

    def list_dir(url: str):
        try:
            path, fs = _hadoop(spark, url)
            if not fs.exists(path):
                return None
            if not fs.getFileStatus(path).isDirectory():
                raise StoreLayoutError(f"{url}: not a directory (give a store root or a "
                                       f"CommitLog directory)")
            return [ListedEntry(s.getPath().getName(), s.getPath().toString(), s.isDirectory(),
                                s.getLen()) for s in fs.listStatus(path)]
        except (StoreLayoutError, OptionalDependencyError):
            raise
        except Exception as err:  # py4j hands over any Java exception (no such scheme, auth)
            message = _java_message(err)
            if "UnsupportedFileSystemException" in message:
                scheme = url.split("://", 1)[0]
                hint = (" (S3 is s3a:// there, with hadoop-aws: --conf spark.jars.packages="
                        "org.apache.hadoop:hadoop-aws:<Spark's Hadoop version>)"
                        if scheme in ("s3", "s3n", "s3a") else
                        " (add the package of that file system to the session with --conf "
                        "spark.jars.packages=...)")
                raise OptionalDependencyError(f"{url}: Spark's Hadoop has no file system for "
                                              f"{scheme}://{hint}") from None
            raise StoreLayoutError(f"{url}: cannot list it through Hadoop: {message}") from None

    return list_dir


#: schemes Hadoop lists natively (fsspec's hdfs goes through libhdfs, rarely set up on a driver)
_HADOOP_FIRST = {"hdfs", "viewfs", "webhdfs"}


def input_lister(spark) -> Lister:
    """List non-local inputs as the executors will read them: with fsspec when it has a driver
    for the scheme (s3fs for s3://), else through the session's Hadoop FileSystem (hdfs://,
    and s3a:// with hadoop-aws)."""
    from .splits import fsspec_can_open, fsspec_lister

    hadoop = hadoop_lister(spark)
    fsspec_list = None

    def list_dir(url: str):
        nonlocal fsspec_list
        scheme = url.split("://", 1)[0]
        if scheme not in _HADOOP_FIRST and fsspec_can_open(scheme):
            fsspec_list = fsspec_list or fsspec_lister()
            return fsspec_list(url)
        return hadoop(url)

    return list_dir


def _java_message(err: Exception) -> str:
    java = getattr(err, "java_exception", None)
    text = java.toString() if java is not None else str(err)
    return text.strip().splitlines()[0] if text.strip() else type(err).__name__


def path_exists(spark, url: str) -> bool:
    if is_local(url):
        return os.path.exists(local_path(url))
    path, fs = _hadoop(spark, url)
    return bool(fs.exists(path))


def is_empty_dir(spark, url: str) -> bool:
    if is_local(url):
        p = Path(local_path(url))
        return p.is_dir() and not any(p.iterdir())
    path, fs = _hadoop(spark, url)
    return bool(fs.getFileStatus(path).isDirectory()) and len(fs.listStatus(path)) == 0


def write_text(spark, url: str, text: str) -> None:
    data = text.encode("utf-8")
    if is_local(url):
        target = Path(local_path(url))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return
    path, fs = _hadoop(spark, url)
    stream = fs.create(path, True)
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()


def delete(spark, url: str) -> None:
    if is_local(url):
        shutil.rmtree(local_path(url), ignore_errors=True)
        return
    path, fs = _hadoop(spark, url)
    fs.delete(path, True)


def rename(spark, source: str, target: str) -> None:
    if is_local(source) and is_local(target):
        os.replace(local_path(source), local_path(target))
        return
    src, fs = _hadoop(spark, source)
    dst, _ = _hadoop(spark, target)
    if not fs.rename(src, dst):
        from ..errors import MqtoolError
        raise MqtoolError(f"cannot rename {source} to {target}")


def join(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name
