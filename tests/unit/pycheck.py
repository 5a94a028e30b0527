"""The Python unit tests' check: count it, and on failure print "<test>: FAIL: <what>" to stderr
and exit 1 (the tests stop at the first failure)."""
import sys


class Checks:
    def __init__(self, name):
        self.name, self.n = name, 0

    def __call__(self, cond, what):
        self.n += 1
        if not cond:
            print(f"{self.name}: FAIL: {what}", file=sys.stderr)
            sys.exit(1)
