"""A client that writes one transfer and then waits, never deleting it (run by
tests/test_storage.py, which SIGKILLs it): prints the transfer's id.

Arguments: the database URL and gpcnn's schema."""

from __future__ import annotations

import sys

import numpy as np

import gpcnn
from gpcnn.engines.transfers import EVERY_KEY, write_transfer

url, schema = sys.argv[1:3]
db = gpcnn.connect(url or None, schema=schema)
print(write_transfer(db.backend, {EVERY_KEY: np.ones(10, dtype="<f4")}), flush=True)
sys.stdin.readline()  # until killed
