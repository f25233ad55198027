"""{{ cookiecutter.description }}"""

# Imported with the package, so that every run names a change to the engine copied here before it was a package that
# an update left in src/<package>/engine/, where nothing runs it any more (engine.py)
from . import engine as engine
