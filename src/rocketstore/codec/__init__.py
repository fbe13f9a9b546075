"""Bytes <-> messages: records, properties, ids and hashes. No I/O, and nothing else of ours."""
