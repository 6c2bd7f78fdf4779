"""gpcnn: train one Keras CNN data-parallel across the segments of a Greenplum-family database."""

__version__ = "0.1.0"

from .engines import connect
from .environment import check_environment
from .install import install

__all__ = ["__version__", "check_environment", "connect", "install"]
