"""Sphinx configuration of benchfarm's documentation (`make docs`)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "_ext"))

project = "benchfarm"
author = "the benchfarm developers"
copyright = "the benchfarm developers"
release = "0.1.0"

extensions = ["myst_parser", "benchfarm_reference"]
source_suffix = {".md": "markdown"}
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
exclude_patterns = ["_build", "README.md"]
root_doc = "index"

html_theme = "furo"            # its CSS and JS ship in the package: the site loads nothing remote
html_title = "benchfarm"
html_static_path: list[str] = []
html_copy_source = False
html_show_sourcelink = False
