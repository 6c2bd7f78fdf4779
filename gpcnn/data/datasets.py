"""Deprecated path of the dataset readers: use ``gpcnn.datasets``; this module goes in the next
release."""

from gpcnn.data import by_name, cifar, image_folder, labelled, mnist, sources
from gpcnn.deprecation import moved_module

__getattr__ = moved_module(
    "gpcnn.data.datasets", "gpcnn.datasets", by_name, mnist, cifar, image_folder, labelled, sources
)
