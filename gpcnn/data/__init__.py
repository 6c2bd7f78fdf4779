"""The data layer: dataset readers behind one interface (``sources.ImageSource``), image tables
(validate, deal, load, read back), ``pack_table`` for images already in the database, and the staging
of arrays given to ``fit``."""
