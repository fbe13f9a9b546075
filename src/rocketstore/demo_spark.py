"""The Spark part of ``make demo``: read the demo store with Spark, count it per topic, export it.

``run(store_path, config)`` starts a local Spark session, reads every message of the store
through the ``rocketstore`` data source, prints messages and body bytes per topic, and writes the
store as Parquet partitioned by topic next to it (``<store>-parquet``).
"""

from __future__ import annotations

import os
import sys
import time

from rocketstore.config import StoreConfig


def run(store_path: str, config: StoreConfig, parquet_path: str | None = None) -> int:
    """Read ``store_path`` with Spark, print messages and bytes per topic, export to Parquet."""
    from pyspark.sql import functions as F

    from rocketstore.spark.jobs import export_parquet
    from rocketstore.spark.schema import config_options
    from rocketstore.spark.session import local_session

    started = time.perf_counter()
    spark = local_session("local[2]", "rocketstore-demo")
    try:
        options = config_options(config)
        df = spark.read.format("rocketstore").options(**options).load(store_path)
        per_topic = (
            df.groupBy("topic")
            .agg(F.count("*").alias("messages"), F.sum(F.length("body")).alias("bytes"))
            .orderBy("topic")
            .collect()
        )
        parts = df.rdd.getNumPartitions()
        print(f"spark: read {os.path.abspath(store_path)} ({parts} partition{'' if parts == 1 else 's'})")
        width = max((len(row["topic"]) for row in per_topic), default=0)
        for row in per_topic:
            print(f"  {row['topic']:<{width}} messages {row['messages']:>6}  body bytes {row['bytes']:>9,}")
        out = parquet_path or os.path.abspath(store_path).rstrip(os.sep) + "-parquet"
        result = export_parquet(spark, store_path, out, options, mode="overwrite")
        print(f"  exported {result['messages']} messages to {out} (Parquet, partitioned by topic)")
        print(f"  spark part took {time.perf_counter() - started:.1f} s")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    from rocketstore.demo import demo_config

    sys.exit(run(sys.argv[1] if len(sys.argv) > 1 else os.path.join("data", "demo"), demo_config()))
