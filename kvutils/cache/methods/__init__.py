"""The cache operations, one per file; `kvutils.cache.registry` lists them in the table's order."""
