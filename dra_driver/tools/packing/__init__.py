"""The placement-packing simulation used by ``migdra bench placement`` and ``migdra plan``."""
