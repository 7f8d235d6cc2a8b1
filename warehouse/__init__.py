"""Releases, the DuckDB warehouse, and the Python consumer API (`from warehouse import load, diff`)."""

from warehouse.api import load, tables
from warehouse.diff import diff

__all__ = ["diff", "load", "tables"]
