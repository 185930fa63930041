"""Build hook: the wheel carries the shipped default bundle as package data (locsum_sdk/engines/default), so
`Summarizer.from_pretrained()` works after a plain `pip install`. Everything else is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

BUNDLE = Path(__file__).resolve().parent / "engines" / "default"


class BuildWithBundle(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:  # an editable install reads the checkout's engines/default
            target = Path(self.build_lib) / "locsum_sdk" / "engines" / "default"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(BUNDLE, target)


setup(cmdclass={"build_py": BuildWithBundle})
