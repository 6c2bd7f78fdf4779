"""The data layer: dataset readers, image tables (validate, pack, deal, load, read back), ``pack_table``
for images already in the database, and the staging of arrays given to ``fit``."""
