"""python -m jitdl ..."""
import sys

from jitdl.cache.cli import main

sys.exit(main())
