"""`python -m perfgate.annotations MODE CODE RESULTS LOG`: the Action's workflow commands (the code is
`perfgate.action`). Kept for workflows written against earlier versions of perfgate's action.yml.
"""

import sys

from perfgate.action import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
