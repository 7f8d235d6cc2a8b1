"""Releases, the DuckDB warehouse, and the Python consumer API (`from warehouse import load`)."""

from warehouse.api import load, tables

__all__ = ["load", "tables"]
