"""The collection's own code as the seam tests read it: every file under roles/, playbooks/ and
plugins/ (tests, the lab and the docs speak of everything), and deploy.yml."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SCOPE = ("roles", "playbooks", "plugins")


def collection_files(root=REPO_ROOT):
    """Each file's path relative to root, in a stable order."""
    for top in SCOPE:
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                yield path.relative_to(root).as_posix()
    if (root / "deploy.yml").is_file():
        yield "deploy.yml"
