"""Serves the built frontend from tb_gradscope/plugin/static/, by whitelist.

A request is answered only when its path names, exactly, a file that exists
under static/ with a whitelisted extension; the comparison is against the
directory's own listing, so `..`, absolute paths and encoded slashes
(werkzeug decodes %2f before we see the path) can never leave the folder.
"""

from __future__ import annotations

import os
import pathlib

STATIC_DIR = pathlib.Path(__file__).resolve().parent / "static"

CONTENT_TYPES = {
    ".js": "application/javascript",
    ".mjs": "application/javascript",
    ".css": "text/css",
    ".map": "application/json",
    ".json": "application/json",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".woff2": "font/woff2",
    ".woff": "font/woff",
}


class StaticFiles:
    """The whitelisted files of a folder, by their relative '/'-joined path."""

    def __init__(self, root: pathlib.Path = STATIC_DIR):
        self.root = root

    def names(self) -> dict[str, pathlib.Path]:
        """{relative name: path} of every servable file (read at call time,
        so a frontend built while TensorBoard runs is served)."""
        found: dict[str, pathlib.Path] = {}
        if not self.root.is_dir():
            return found
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for file in files:
                path = pathlib.Path(folder) / file
                if file.startswith(".") or path.suffix not in CONTENT_TYPES or path.is_symlink():
                    continue
                found[path.relative_to(self.root).as_posix()] = path
        return found

    def read(self, name: str) -> tuple[bytes, str] | None:
        """(content, content type) of a whitelisted file, or None."""
        path = self.names().get(name)
        if path is None:
            return None
        return path.read_bytes(), CONTENT_TYPES[path.suffix]
