"""The ``rocketstore`` command line: inspect, export, import, query, verify, recover, produce, consume.

It uses the store's public API only (the store never imports it). The entry point is
``rocketstore.cli.main:main`` and the click group ``rocketstore.cli.main:cli`` (for tests with
``click.testing.CliRunner``); ``python -m rocketstore.cli.main`` runs it too. Nothing is imported
here, so that running the module with ``-m`` loads it only once.

One module per command group: ``common`` (options, output), ``inspect_cmd``, ``transfer``
(export, import), ``query_cmd``, ``check`` (verify, recover), ``messaging`` (produce, consume),
``clean_cmd`` (clean, topic deletion, disk report), ``spark_cmd`` (the Spark jobs).
"""
