"""PySpark integration: the ``rocketstore`` data source (batch and streaming reads, writes) and
store jobs (rebuild, verify, export) that run on Spark.

Needs the ``spark`` extra (``pip install -e '.[spark]'`` in a checkout). Nothing in the store imports
this package.
"""

from __future__ import annotations

__all__ = ["RocketStoreDataSource", "local_session", "register"]


def __getattr__(name: str):  # lazy: importing rocketstore.spark must not start pyspark
    if name == "RocketStoreDataSource":
        from rocketstore.spark.source import RocketStoreDataSource

        return RocketStoreDataSource
    if name in ("local_session", "register"):
        from rocketstore.spark import session

        return getattr(session, name)
    raise AttributeError(name)
