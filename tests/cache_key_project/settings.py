"""A module attribute computed at import time from the environment."""
import os

SCALE = float(os.environ.get("CK_SCALE", "2.0"))
