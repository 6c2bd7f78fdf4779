"""Deprecated path of the named CNNs: use ``gpcnn.models``; this module goes in the next release."""

from gpcnn.deprecation import moved_module
from gpcnn.estimator import named_models

__getattr__ = moved_module("gpcnn.study.models", "gpcnn.models", named_models)
