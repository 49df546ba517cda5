"""Unit tests, in folders that mirror src/odradek's packages.

Where a new unit test goes: a test of ``odradek.X.Y.module`` goes in ``tests/unit/X/Y/``
(``odradek.storage.log`` -> ``tests/unit/storage/``, ``odradek.server.replication.partition``
-> ``tests/unit/server/replication/``). A test that touches several packages goes with the one
whose behaviour it checks, which is usually the one it imports most. A new folder gets an empty
``__init__.py``, so that two folders may hold files of the same name. Name the file and its tests
after the behaviour they check. Helpers shared by a folder's tests sit beside them
(``coordinator/txn_groups_support.py``); fixtures shared by a folder go in its ``conftest.py``.

Only tests of ``odradek.cli`` and of the repository itself (the README and docs, ``bench/``) stay
at this level.
"""
