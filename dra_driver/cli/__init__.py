"""The ``migdra`` command line (entry point: ``dra_driver.cli.main:main``)."""
