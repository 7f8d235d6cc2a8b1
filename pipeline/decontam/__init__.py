"""Decontamination: finding training records that copy evaluation records (pure logic, no Dagster)."""
