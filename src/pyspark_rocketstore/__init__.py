"""Automatic registration of the ``rocketstore`` Spark data source.

PySpark imports every top-level module named ``pyspark_*`` it finds with ``pkgutil.iter_modules()``
and registers its ``DefaultSource`` under ``DefaultSource.name()``, so with rocketstore installed
``spark.read.format("rocketstore").load(STORE)`` works without ``spark.dataSource.register``.
"""

from rocketstore.spark.source import RocketStoreDataSource as DefaultSource

__all__ = ["DefaultSource"]
