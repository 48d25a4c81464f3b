"""Generators of published model architectures, in the op pattern their exporters write."""
