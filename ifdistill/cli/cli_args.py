"""Command-line parsing that answers a malformed argument the way every ifdistill CLI does: one line
naming the program and the problem, exit code 2 (argparse's own answer is the usage text, then the
error; the usage stays one ``--help`` away)."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (--help shows the usage)", file=sys.stderr)
        sys.exit(2)
