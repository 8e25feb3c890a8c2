"""`python -m perfgate.trial SPEC OUT`: one trial in this process (the code is `perfgate.measure.trial`).

Kept as an entry point for workflows that start trials themselves; perfgate's own runner starts
`perfgate.measure.trial` directly.
"""

import sys

from perfgate.measure.trial import main

if __name__ == "__main__":
    sys.exit(main())
