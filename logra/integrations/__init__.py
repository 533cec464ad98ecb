"""Glue to training frameworks (each module imports its framework; none is imported here)."""
