"""Spark audits and exports of archived CommitLogs (``mqtool spark audit|export``).

The work is split so that pyspark is imported only where it must be:

* :mod:`mqtool.spark.plan` (driver, no pyspark): inputs -> brokers -> CommitLog files ->
  byte-range splits, and the findings the file listing alone gives (sizes, gaps, stray files);
* :mod:`mqtool.spark.splits` (executors, no pyspark): one split scanned with the shared scanner;
* :mod:`mqtool.spark.arrow` (executors, no pyspark): the scanner's numpy batches as Arrow record
  batches (the audit's ``mapInArrow`` and the data source's reader);
* :mod:`mqtool.spark.tablewrite` (executors, no pyspark): an audit task writing its split's rows
  to the ``messages`` table with pyarrow, when the output is on a local or shared file system;
* :mod:`mqtool.spark.crosscheck` (driver and executors): ``verify`` itself on store roots the
  executors read, a task per CommitLog file, merged on the driver;
* :mod:`mqtool.spark.source` (pyspark): ``spark.read.format("rocketmq")``, see :func:`register`;
* :mod:`mqtool.spark.session`, :mod:`mqtool.spark.scanpass` and :mod:`mqtool.spark.job`
  (driver, pyspark): the session, the scan pass, then the jobs' findings, figures, outputs and
  summary.

``import mqtool.spark`` stays cheap and works without pyspark; :func:`require_pyspark` is what a
command calls before touching the jobs.
"""
from __future__ import annotations

import importlib.util
import os
import sys

from ..errors import OptionalDependencyError

MISSING_PYSPARK = "pyspark is not installed; install 'mqtool[spark]' (and Java 17+)"
#: what Spark's Arrow exchange (mapInArrow, Python data sources) needs besides pyspark
ARROW_PACKAGES = ("pyarrow", "pandas")


#: the executors' Python this import chose (:func:`_default_executor_python`), None if it chose none
DEFAULTED_PYTHON: str | None = None


def _spark_context_exists() -> bool:
    if "PYSPARK_GATEWAY_PORT" in os.environ:     # spark-submit or a Spark kernel: its JVM exists
        return True
    pyspark = sys.modules.get("pyspark")
    context = getattr(pyspark, "SparkContext", None) if pyspark is not None else None
    return context is not None and context._active_spark_context is not None


def _default_executor_python() -> None:
    """A notebook on a venv kernel that is not activated: Spark starts its Python workers as
    ``python3`` from PATH (PYSPARK_PYTHON unset), which has no mqtool. When mqtool.spark is
    imported before any SparkContext exists, the executors run this interpreter instead (a
    session started later reads PYSPARK_PYTHON). :func:`mqtool.spark.session.build_session`
    takes that choice back for masters whose executors are other machines' Pythons (YARN,
    Kubernetes)."""
    global DEFAULTED_PYTHON
    if "PYSPARK_PYTHON" in os.environ or _spark_context_exists() or not sys.executable:
        return
    os.environ["PYSPARK_PYTHON"] = DEFAULTED_PYTHON = sys.executable


_default_executor_python()


def require_pyspark() -> None:
    """Raise :class:`OptionalDependencyError` (one line for the CLI) when pyspark, or what its
    Arrow exchange needs, is absent."""
    if importlib.util.find_spec("pyspark") is None:
        raise OptionalDependencyError(MISSING_PYSPARK)
    for name in ARROW_PACKAGES:
        if importlib.util.find_spec(name) is None:
            raise OptionalDependencyError(f"{name} is not installed; install 'mqtool[spark]'")


def register(spark) -> None:
    """Make ``spark.read.format("rocketmq")`` read CommitLogs in this session (Spark 4's Python
    data source API): ``spark.read.format("rocketmq").load("/archive/broker-a/store")``. See
    :mod:`mqtool.spark.source` for the options."""
    require_pyspark()
    from .session import check_executors, ship_code
    from .source import RocketMQDataSource

    ship_code(spark)   # a cluster's executors import mqtool from the zip
    # the reader takes a query's filters (mqtool.spark.pushdown); Spark refuses a reader that
    # can while this is off
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    check_executors(spark)    # one line naming PYSPARK_PYTHON, not a Java stack at load()
    spark.dataSource.register(RocketMQDataSource)
