"""bench.py's harness: timing, loader speed and the report; the image task gives its own rows (plain loops)."""
