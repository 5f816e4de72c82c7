"""What the Spark side needs from its environment, below every other Spark module: whether
pyspark and its Arrow exchange are installed, and which Python the executors run (chosen when
:mod:`mqtool.spark` is imported)."""
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
