"""The package's tests run from a checkout too: its source on the path when it is not installed."""

import sys
from pathlib import Path

try:
    import keras_classifier  # noqa: F401 - installed (pip install -e .)
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
