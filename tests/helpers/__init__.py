"""Functions shared by the test modules, in one place: the small PyMC models (``models``), random
log-potential tables (``tables``), brute-force references (``brute_force``) and the save/reload
round trip of results (``result_io``). Fixtures live in ``tests/conftest.py``; pytest puts
``tests/`` on the import path (``pythonpath`` in pyproject.toml), so a test module in any folder
imports ``from helpers.models import ...``."""
