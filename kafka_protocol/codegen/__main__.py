"""``python -m kafka_protocol.codegen [--check]``: regenerate kafka_protocol/messages/.

With ``--check``, nothing is written; the exit status is 1 when any checked-in
module differs from what the generator would produce now.
"""

from __future__ import annotations

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
