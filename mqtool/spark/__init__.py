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

from .environment import (ARROW_PACKAGES, DEFAULTED_PYTHON, MISSING_PYSPARK,  # noqa: F401
                          require_pyspark)


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
