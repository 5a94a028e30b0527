"""Console scripts: the purlinrun and purlin-info programs built with this package."""

import os
import sys


def _exec(name):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    if not os.access(path, os.X_OK):
        sys.stderr.write("purlin: %s is missing from the installed package (%s)\n" % (name, path))
        return 127
    os.execv(path, [name] + sys.argv[1:])
    return 127  # not reached


def purlinrun():
    """purlinrun -n N program args: start N ranks on this machine."""
    sys.exit(_exec("purlinrun"))


def purlin_info():
    """purlin-info: the version and every PURLIN_* setting."""
    sys.exit(_exec("purlin-info"))
