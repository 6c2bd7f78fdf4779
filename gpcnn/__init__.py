"""gpcnn: train one Keras CNN data-parallel across the segments of a Greenplum-family database."""

__version__ = "0.1.0"

from .engines import connect  # noqa: E402
from .environment import check_environment  # noqa: E402
from .install import install  # noqa: E402

__all__ = ["__version__", "check_environment", "connect", "install"]
