"""Peers' own test suites, fetched at test time and run against odradek (docs/compatibility.md)."""
