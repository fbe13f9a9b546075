"""A local SparkSession set up the way PySpark 4 works best on one machine (and in tests).

``SPARK_LOCAL_IP`` and ``PYSPARK_PYTHON`` must be in the environment before the JVM starts:
the first avoids a warning and the loopback detour, the second makes the Python workers run
this interpreter (which has pyarrow and rocketstore) instead of whatever ``python3`` is on PATH.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
from typing import Any

LOG4J = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
# PySpark's gateway starts logging as a shell: a level of its own equal to the root's keeps Spark
# from printing "Setting default log level to WARN" on every start
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


def prepare_environment() -> None:
    """Environment the JVM and the Python workers must inherit (call before the session starts)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def _log4j_file(folder: str) -> str:
    path = os.path.join(folder, "log4j2.properties")
    if not os.path.exists(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(LOG4J)
    return path


WORK_PREFIX = "rocketstore-spark-"


def new_work_dir() -> str:
    """A work folder of our own in the temporary folder, removed when the program ends (Spark's
    own files in it go first); the folders of sessions whose program was killed (no exit handler
    ran) go now, those whose recorded driver process is known to be gone."""
    from rocketstore.spark.staging import claim_folder, driver_gone

    with contextlib.suppress(OSError):
        for entry in os.scandir(tempfile.gettempdir()):
            if entry.name.startswith(WORK_PREFIX) and entry.is_dir(follow_symlinks=False) and driver_gone(entry.path):
                shutil.rmtree(entry.path, ignore_errors=True)
    work_dir = tempfile.mkdtemp(prefix=WORK_PREFIX)
    claim_folder(work_dir, this_process=True)  # the JVM's parent (a launcher above it may outlive it)
    atexit.register(shutil.rmtree, work_dir, ignore_errors=True)
    return work_dir


def local_session(
    master: str = "local[2]",
    app_name: str = "rocketstore",
    *,
    work_dir: str | None = None,
    driver_memory: str = "1g",
    conf: dict[str, Any] | None = None,
    register_source: bool = True,
):  # -> pyspark.sql.SparkSession
    """A SparkSession (``getOrCreate``): UI and progress bars off, quiet logs, 2 shuffle partitions,
    the master's own default parallelism (``local[N]``: N; what the jobs plan their tasks by), UTC
    session time, filter pushdown for Python data sources on, and (unless ``register_source``
    is false: an installed rocketstore is found by PySpark's own lookup) rocketstore registered."""
    prepare_environment()
    from pyspark.sql import SparkSession

    if work_dir is None:
        work_dir = new_work_dir()
    os.makedirs(work_dir, exist_ok=True)
    java_opts = f"-Dlog4j2.configurationFile=file:{_log4j_file(work_dir)} -Dderby.system.home={work_dir}/derby"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.local.dir", os.path.join(work_dir, "local"))
        .config("spark.sql.warehouse.dir", os.path.join(work_dir, "warehouse"))
        .config("spark.driver.extraJavaOptions", java_opts)
    )
    if master.startswith("local"):
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
    for key, value in (conf or {}).items():
        builder = builder.config(key, str(value))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if register_source:
        register(spark)
    return spark


def register(spark: Any) -> None:
    """``spark.dataSource.register`` the rocketstore source (harmless when auto-registered too)."""
    from rocketstore.spark.source import RocketStoreDataSource

    spark.dataSource.register(RocketStoreDataSource)
