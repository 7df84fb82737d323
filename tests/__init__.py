"""The test suite, a regular package: ``tests.<module>`` is this folder's whatever else is
installed (a site-packages ``tests`` package would otherwise win over a folder without
``__init__.py``)."""
