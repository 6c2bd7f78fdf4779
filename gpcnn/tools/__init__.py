"""Tools around the library: the ``gpcnn`` command, the environment check (``gpcnn doctor``) and
the embedded PostgreSQL cluster used when no URL is given."""
