"""Tests of the xformer data layer (package, so module names cannot clash with other test folders)."""
