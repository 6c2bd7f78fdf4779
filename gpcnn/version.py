"""The version of gpcnn, in a module of its own so that every layer can read it at load time."""

__version__ = "0.2.0"
