"""The `miniinfer` command of the pip package: runs the bundled C++ binary (same arguments)."""
import os
import sys

from . import _lib


def main() -> None:
    binary = str(_lib.binary_path())
    os.execv(binary, [binary, *sys.argv[1:]])


if __name__ == "__main__":
    main()
